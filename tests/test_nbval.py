"""`python -m pytest --nbval-lax solutions/` (nbval, configured by the repository's conftest.py) finds every code cell of
every solution notebook: the command docs/development.md gives for running the solutions in smoke mode."""
import subprocess
import sys

import nbformat
import pytest
from support.notebooks import ROOT, SOLUTIONS

pytestmark = pytest.mark.slow   # starts pytest again


def test_nbval_collects_every_code_cell_of_every_solution():
    found = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--collect-only", "-q", "-p", "no:xdist",
                            "-o", "addopts=", "solutions/"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stdout + found.stderr
    cells = [line.split("::")[0] for line in found.stdout.splitlines() if "::Cell " in line]
    for path in sorted(SOLUTIONS.glob("*/*.ipynb")):
        code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        assert cells.count(path.relative_to(ROOT).as_posix()) == len(code), path.stem
