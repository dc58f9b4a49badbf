"""The student releases in notebooks/ are what nbgrader makes of solutions/, and give nothing away; the release
command and nbgrader work from an environment that is not activated, and the command writes nothing outside the
releases unless it runs on the course repository's own solutions."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from support.notebooks import ROOT, SOLUTIONS, answer_ids, grade_cells_of, nbgrader_cells

from autograder import CONFIG
from autograder.__main__ import main
from autograder.release import INSTALL_ID, assignments, generate_releases, install_cell

NOTEBOOKS = ROOT / "notebooks"
ASSIGNMENTS = assignments(SOLUTIONS)


def read(folder, assignment):
    return nbformat.read(folder / assignment / f"{assignment}.ipynb", as_version=4)


def test_every_solution_has_a_release():
    released = sorted(p.name for p in NOTEBOOKS.iterdir() if p.is_dir())
    assert released == ASSIGNMENTS, "notebooks/ and solutions/ hold different assignments: run `python -m autograder release`"


@pytest.mark.slow
def test_releases_are_current(tmp_path):
    generate_releases(SOLUTIONS, tmp_path)
    for assignment in ASSIGNMENTS:
        fresh = json.loads((tmp_path / assignment / f"{assignment}.ipynb").read_text())
        stored = json.loads((NOTEBOOKS / assignment / f"{assignment}.ipynb").read_text())
        assert stored == fresh, (f"notebooks/{assignment} is stale: regenerate it with "
                                 f"`python -m autograder release {assignment}`")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_hides_solutions_and_hidden_tests(assignment):
    release = read(NOTEBOOKS, assignment)
    text = "\n".join(cell.source for cell in release.cells)
    for secret in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "_hidden_test"):
        assert secret not in text, f"the release of {assignment} contains '{secret}'"
    for grade_id, cell in nbgrader_cells(release).items():
        meta = cell.metadata["nbgrader"]
        if meta.get("solution") and cell.cell_type == "code":
            assert "raise NotImplementedError()" in cell.source, f"{grade_id} is not stubbed in the release"
        if meta.get("solution") and cell.cell_type == "markdown":
            assert cell.source == "YOUR ANSWER HERE", f"the model answer of {grade_id} is in the release"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_notebook_layout(assignment):
    """The layout the contract fixes, checked on the instructor source."""
    solution = read(SOLUTIONS, assignment)
    exercises = answer_ids(solution)
    assert exercises, f"{assignment} has no exercise"
    for exercise in exercises:
        tests = grade_cells_of(solution, exercise)
        assert tests, f"{assignment}: exercise {exercise} has no test cell test_{exercise}[_...]"
        for grade_id in tests:
            cell = nbgrader_cells(solution)[grade_id]
            assert cell.metadata["nbgrader"]["points"] > 0, f"{grade_id} gives no points"
            assert "BEGIN HIDDEN TESTS" in cell.source, f"{grade_id} has no hidden tests"
            visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
            assert "assert" in visible or "check_" in visible, f"{grade_id} has no visible test"
    code = [cell for cell in solution.cells if cell.cell_type == "code"]
    assert code[0].metadata.get("nbgrader", {}).get("grade_id") == INSTALL_ID and "pip\", \"install" in code[0].source, \
        "the first code cell must install the course package"
    setup = code[1].source
    for name in ("import math", "import torch", "import torch.nn as nn", "import torch.nn.functional as F"):
        assert name in setup, f"the setup cell of {assignment} lacks `{name}`"


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
def test_notebooks_are_stored_without_outputs(folder):
    for path in sorted((ROOT / folder).glob("*/*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, \
                    f"{path.relative_to(ROOT)} stores outputs: clear them before committing"


RUBRIC = "**Rubric (instructor only)**"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_rubrics_stay_with_the_instructor(assignment):
    """Every answer graded by hand has a rubric in the instructor source, and no line of it reaches the release."""
    solution, release = read(SOLUTIONS, assignment), read(NOTEBOOKS, assignment)
    written = {grade_id: cell for grade_id, cell in nbgrader_cells(solution).items()
               if cell.cell_type == "markdown" and cell.metadata["nbgrader"].get("solution")}
    assert written, f"{assignment} has no written answer"
    released = "\n".join(cell.source for cell in release.cells)
    assert "Rubric" not in released, f"the release of {assignment} mentions a rubric"
    for grade_id, cell in written.items():
        assert RUBRIC in cell.source, f"{grade_id} in solutions/{assignment} has no {RUBRIC}"
        rubric = cell.source.split(RUBRIC, 1)[1]
        assert "point" in rubric, f"the rubric of {grade_id} gives no points"
        leaked = [line for line in rubric.splitlines() if len(line.strip()) > 20 and line.strip() in released]
        assert not leaked, f"the release of {assignment} contains the rubric of {grade_id}: {leaked[0]!r}"


# A PATH without the virtual environment's scripts, as from `venv/bin/python ...` when it is not activated:
# nbgrader runs `alembic` from PATH to make a gradebook.
NOT_ACTIVATED = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
MY_INSTALL = "# the instructor's own install cell\nimport transformer_course"


@pytest.mark.slow
def test_release_in_a_course_directory_writes_nothing_but_the_releases(tmp_path):
    """Given a course directory's sources, `release` must leave them (and any README) as they are, and it works
    from an environment that is not activated."""
    assignment = "03_masking"
    shutil.copytree(SOLUTIONS / assignment, tmp_path / "source" / assignment)
    source = tmp_path / "source" / assignment / f"{assignment}.ipynb"
    notebook = nbformat.read(source, as_version=4)
    install_cell(notebook).source = MY_INSTALL
    nbformat.write(notebook, source)
    (tmp_path / "README.md").write_text("pip install `pip install git+https://github.com/me/mine@main`\n")
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    done = subprocess.run([sys.executable, "-m", "autograder", "release", "--solutions", "source", "--notebooks",
                           "release"], cwd=tmp_path, env=NOT_ACTIVATED, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {path: path.read_bytes() for path in before} == before, "release changed files outside release/"
    released = read(tmp_path / "release", assignment)
    assert install_cell(released).source == MY_INSTALL and "BEGIN SOLUTION" not in json.dumps(released)


def test_release_where_there_are_no_solutions_is_refused_in_one_line(tmp_path, monkeypatch, refused):
    monkeypatch.chdir(tmp_path)       # a course directory: source/, no solutions/
    (tmp_path / "source").mkdir()
    assert "nbgrader generate_assignment" in refused(main, ["release"])
    assert "no such assignment" in refused(main, ["release", "--solutions", str(SOLUTIONS), "99_nothing"])
    assert sorted(tmp_path.iterdir()) == [tmp_path / "source"]


def test_a_solution_nbgrader_cannot_release_is_refused_in_one_line_with_nbgraders_reason(tmp_path, refused):
    shutil.copytree(SOLUTIONS / "03_masking", tmp_path / "solutions" / "03_masking")
    path = tmp_path / "solutions" / "03_masking" / "03_masking.ipynb"
    notebook = nbformat.read(path, as_version=4)
    nbgrader_cells(notebook)["padding_mask"].source = "def padding_mask(ids, pad_idx):\n    ### BEGIN SOLUTION\n    pass"
    nbformat.write(notebook, path)
    line = refused(main, ["release", "--solutions", str(tmp_path / "solutions"), "--notebooks", str(tmp_path / "out")])
    assert "nbgrader generate_assignment 03_masking failed: RuntimeError: no end solution statement found" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_nbgrader_works_with_the_course_configuration_from_an_environment_that_is_not_activated(tmp_path):
    """`venv/bin/nbgrader generate_assignment` failed with FileNotFoundError: 'alembic' and released nothing."""
    shutil.copy(CONFIG, tmp_path / "nbgrader_config.py")
    shutil.copytree(SOLUTIONS / "03_masking", tmp_path / "source" / "03_masking")
    nbgrader = Path(sys.executable).parent / "nbgrader"
    done = subprocess.run([str(nbgrader), "generate_assignment", "03_masking"], cwd=tmp_path, env=NOT_ACTIVATED,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "alembic" not in done.stderr, done.stderr[-2000:]
    assert (tmp_path / "release" / "03_masking" / "03_masking.ipynb").is_file()
