"""Test-wide settings.

Multi30k: on a machine without internet (CI here) the notebooks and the trainer read the official files
from a local mirror instead of downloading them. ../shared/data/multi30k next to the repository is such a
mirror; set MULTI30K_MIRROR yourself to use another. Notebook kernels and nbgrader inherit the variable.

Secrets: the hidden tests' inputs are drawn from COURSE_TEST_SEED (course_testkit/probing.py). The tests fix it
(support/courses.py's TEST_SEED unless it is set) in their own processes and in those they start, so that a
failure can be repeated; set it to try another. The tests of a secret drawn per submission remove it from the
environment they grade in.

Threads: pytest-xdist already runs one worker per core. A worker whose torch also used every core would
fight the other workers for them, and torch's spinning threads make that very slow (a 10-second test took
130 s in the full suite), so each worker, and every kernel it starts, uses one thread.

`refused`: the commands' answer to bad input, one line on stderr, no traceback, exit status 2.
"""
import os
from pathlib import Path

import pytest
from support.courses import TEST_SEED

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"

if "MULTI30K_MIRROR" not in os.environ and MIRROR.is_dir():
    os.environ["MULTI30K_MIRROR"] = str(MIRROR)

os.environ.setdefault("COURSE_TEST_SEED", TEST_SEED)

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def pytest_collection_modifyitems(items):
    """The long tests first, then the other slow ones, then the quick ones. pytest-xdist hands out the work (a
    single test, or a whole xdist group) in this order (`--no-loadscope-reorder`): so the longest tests (07 and
    08 in quick mode, an install) start at once instead of after every group, and the quick tests are left to
    even out the two workers' ends, which otherwise differed by a minute or two."""
    items.sort(key=lambda item: (item.get_closest_marker("long") is None, item.get_closest_marker("slow") is None))


@pytest.fixture
def refused(capsys):
    """refused(main, argv) runs a command's main(argv) on bad input and returns the one line it printed on
    stderr, after checking that it refused with exit status 2 and printed no traceback."""
    def run(main, argv):
        try:
            status = main(argv)
        except SystemExit as exit:
            status = exit.code
        printed = capsys.readouterr()
        assert status == 2, f"exit status {status} for {argv}: {printed.err}"
        assert "Traceback" not in printed.out + printed.err
        lines = printed.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), printed.err
        return lines[0]
    return run
