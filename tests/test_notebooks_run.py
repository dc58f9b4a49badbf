"""Every solution notebook runs top to bottom on CPU, from a folder of its own (as on Colab)."""
import time

import nbformat
import pytest
from nbclient import NotebookClient

from grading import SOLUTIONS

pytestmark = pytest.mark.slow   # runs notebooks, kernels or the grader: `-m 'not slow'` leaves it out

NOTEBOOKS = sorted(SOLUTIONS.glob("*/*.ipynb"))
# Run in smoke mode (every cell, tiny sizes) rather than the quick mode a student runs: 09's quick mode trains a
# language model and two translators, about 8 minutes on one thread, most of the suite's longest worker.
SMOKE = {"09_gpt"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_solution_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the test runner already uses one worker per core
    if path.stem in SMOKE:
        monkeypatch.setenv("COURSE_SMOKE", "1")
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # Run in an empty folder: a notebook that reads files relative to the repository would fail here.
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    print(f"{path.stem}: {time.perf_counter() - start:.1f} s")
    errors = [(cell.get("id"), o.ename, o.evalue) for cell in notebook.cells if cell.cell_type == "code"
              for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"{path.stem} raised errors: {errors}"
