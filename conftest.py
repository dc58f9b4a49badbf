"""Running the solution notebooks with nbval: `python -m pytest --nbval-lax solutions/` (docs/development.md).

With nbval on, every notebook runs in smoke mode (COURSE_SMOKE=1: the training demos take a few steps, as under
the autograder) with a non-interactive matplotlib, in a kernel of the environment pytest runs in, and all the cells of
one notebook stay on one pytest-xdist worker (they share one kernel, in order). tests/conftest.py configures the
test suite itself.
"""
import os

import pytest


def _nbval(config):
    return config.getoption("nbval", default=False) or config.getoption("nbval_lax", default=False)


def pytest_configure(config):
    if _nbval(config):
        os.environ.setdefault("COURSE_SMOKE", "1")
        os.environ.setdefault("MPLBACKEND", "Agg")
        config.option.nbval_current_env = True


def pytest_collection_modifyitems(config, items):
    if _nbval(config):
        for item in items:
            if item.nodeid.split("::")[0].endswith(".ipynb"):
                item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
