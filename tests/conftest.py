"""Test-wide settings.

Multi30k: on a machine without internet (CI here) the notebooks and the trainer read the official files
from a local mirror instead of downloading them. ../shared/data/multi30k next to the repository is such a
mirror; set MULTI30K_MIRROR yourself to use another. Notebook kernels and nbgrader inherit the variable.
"""
import os
from pathlib import Path

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"

if "MULTI30K_MIRROR" not in os.environ and MIRROR.is_dir():
    os.environ["MULTI30K_MIRROR"] = str(MIRROR)
