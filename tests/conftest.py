"""Test-wide settings.

Multi30k: on a machine without internet (CI here) the notebooks and the trainer read the official files
from a local mirror instead of downloading them. ../shared/data/multi30k next to the repository is such a
mirror; set MULTI30K_MIRROR yourself to use another. Notebook kernels and nbgrader inherit the variable.

Threads: pytest-xdist already runs one worker per core. A worker whose torch also used every core would
fight the other workers for them, and torch's spinning threads make that very slow (a 10-second test took
130 s in the full suite), so each worker, and every kernel it starts, uses one thread.
"""
import os
from pathlib import Path

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"

if "MULTI30K_MIRROR" not in os.environ and MIRROR.is_dir():
    os.environ["MULTI30K_MIRROR"] = str(MIRROR)

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
