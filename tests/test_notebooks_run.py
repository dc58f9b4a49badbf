"""Every solution notebook with a quick mode runs top to bottom in it on CPU, from a folder of its own (as on Colab).

A notebook that reads COURSE_SMOKE has two sizes: the quick mode a student runs, and the smoke mode of the
autograder (a few training steps). tests/test_autograde.py runs every notebook in smoke mode (its release filled
with the solutions, through nbgrader, from a folder of its own) and checks that no cell raises; for a notebook that
never reads COURSE_SMOKE that is the run a student makes, so only the quick modes run here.
"""
import time

import nbformat
import pytest
from nbclient import NotebookClient

from grading import SOLUTIONS

pytestmark = pytest.mark.slow   # runs notebooks, kernels or the grader: `-m 'not slow'` leaves it out

# 09's quick mode trains a language model and two translators: about 8 minutes on one thread, most of the suite's
# longest worker. Its smoke mode runs in tests/test_autograde.py.
TOO_LONG = {"09_gpt"}
NOTEBOOKS = [path for path in sorted(SOLUTIONS.glob("*/*.ipynb"))
             if "COURSE_SMOKE" in path.read_text(encoding="utf-8") and path.stem not in TOO_LONG]


def test_the_training_notebooks_run_here_in_their_quick_mode():
    assert {"07_training", "08_decoding_bleu"} <= {path.stem for path in NOTEBOOKS}, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_solution_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the test runner already uses one worker per core
    monkeypatch.delenv("COURSE_SMOKE", raising=False)
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # Run in an empty folder: a notebook that reads files relative to the repository would fail here.
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    print(f"{path.stem}: {time.perf_counter() - start:.1f} s")
    errors = [(cell.get("id"), o.ename, o.evalue) for cell in notebook.cells if cell.cell_type == "code"
              for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"{path.stem} raised errors: {errors}"
