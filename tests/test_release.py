"""The student releases in notebooks/ are what nbgrader makes of solutions/, and give nothing away."""
import json

import nbformat
import pytest

from autograder.release import assignments, generate_releases
from grading import ROOT, SOLUTIONS, answer_ids, grade_cells_of, nbgrader_cells

NOTEBOOKS = ROOT / "notebooks"
ASSIGNMENTS = assignments(SOLUTIONS)


def read(folder, assignment):
    return nbformat.read(folder / assignment / f"{assignment}.ipynb", as_version=4)


def test_every_solution_has_a_release():
    released = sorted(p.name for p in NOTEBOOKS.iterdir() if p.is_dir())
    assert released == ASSIGNMENTS, "notebooks/ and solutions/ hold different assignments: run `python -m autograder release`"


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
    assert "find_spec(\"transformer_course\")" in code[0].source, "the first code cell must install the course package"
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
