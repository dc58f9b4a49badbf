"""Every solution notebook with a quick mode runs top to bottom in it on CPU, from a folder of its own (as on Colab).

A notebook that reads COURSE_SMOKE has two sizes: the quick mode a student runs, and the smoke mode of the
autograder (a few training steps). tests/test_autograde.py runs every notebook in smoke mode (its release filled
with the solutions, through nbgrader, from a folder of its own) and checks that no cell raises; for a notebook that
never reads COURSE_SMOKE that is the run a student makes, so only the quick modes run here.

Notebooks 07 and 08 run as a student runs them: 07 saves its quick model under ~/transformer-course-runs, and 08
decodes that model (without it, 08 trains one of its own for two minutes; the smoke mode takes that path). Their
home is a folder of the test's, so that neither reads nor leaves a model in the home of whoever runs the tests.
"""
import time

import matplotlib
import nbformat
import pytest
from nbclient import NotebookClient
from support.notebooks import SOLUTIONS

from transformer_course.data import default_cache_dir

pytestmark = pytest.mark.slow   # runs notebooks, kernels or the grader: `-m 'not slow'` leaves it out

# 09's quick mode trains a language model and three translators (about 13 minutes on one thread), 10's pre-trains
# a GPT and fine-tunes it eight times (about 20 CPU-minutes): each would be the suite's longest worker. Their smoke modes run in
# tests/test_autograde.py.
TOO_LONG = {"09_gpt", "10_pretrain_finetune"}
NOTEBOOKS = [path for path in sorted(SOLUTIONS.glob("*/*.ipynb"))
             if "COURSE_SMOKE" in path.read_text(encoding="utf-8") and path.stem not in TOO_LONG]
ONE_AFTER_THE_OTHER = ("07_training", "08_decoding_bleu")    # 08 decodes the model 07 trains
ON_THEIR_OWN = [path for path in NOTEBOOKS if path.stem not in ONE_AFTER_THE_OTHER]


@pytest.fixture
def quick_mode(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the test runner already uses one worker per core
    monkeypatch.delenv("COURSE_SMOKE", raising=False)


def run(path, folder):
    """The solution notebook at `path`, executed in `folder` (a student's empty working folder)."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # Run in an empty folder: a notebook that reads files relative to the repository would fail here.
    NotebookClient(notebook, timeout=600, kernel_name="python3", shutdown_kernel="immediate",
                   resources={"metadata": {"path": str(folder)}}).execute()
    print(f"{path.stem}: {time.perf_counter() - start:.1f} s")
    errors = [(cell.get("id"), o.ename, o.evalue) for cell in notebook.cells if cell.cell_type == "code"
              for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"{path.stem} raised errors: {errors}"
    return notebook


def printed(notebook, cell_id):
    cell = next(cell for cell in notebook.cells if cell.get("id") == cell_id)
    return "".join(output.get("text", "") for output in cell.outputs)


def test_the_training_notebooks_run_here_in_their_quick_mode():
    assert set(ONE_AFTER_THE_OTHER) <= {path.stem for path in NOTEBOOKS}, NOTEBOOKS


@pytest.mark.parametrize("path", ON_THEIR_OWN, ids=[p.stem for p in ON_THEIR_OWN])
def test_solution_notebook_runs(path, tmp_path, quick_mode):
    run(path, tmp_path)


@pytest.mark.long
def test_notebook_08_decodes_the_model_notebook_07_trained(tmp_path, quick_mode, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    # Another home, the same caches: Multi30k's token cache and matplotlib's font list are not built again.
    monkeypatch.setenv("MULTI30K_CACHE", str(default_cache_dir()))
    monkeypatch.setenv("MPLCONFIGDIR", matplotlib.get_configdir())
    monkeypatch.setenv("HOME", str(home))
    folders = {stem: tmp_path / stem for stem in ONE_AFTER_THE_OTHER}
    for folder in folders.values():
        folder.mkdir()
    run(SOLUTIONS / "07_training" / "07_training.ipynb", folders["07_training"])
    saved = home / "transformer-course-runs" / "quick" / "best.pt"
    assert saved.is_file(), f"07's quick mode saved no model at {saved}"
    decoding = run(SOLUTIONS / "08_decoding_bleu" / "08_decoding_bleu.ipynb", folders["08_decoding_bleu"])
    assert f"loaded {saved}" in printed(decoding, "train"), "08 did not decode the model 07 saved"
