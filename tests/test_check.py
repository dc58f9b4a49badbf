"""A student's check before handing in (``python -m autograder check``, autograder/check.py), on notebook 03.

The report names cells as the student sees them (the exercise, the question, a cell's first line; never "cell
22"), names the written questions still unanswered, says a Colab repair in one line (each repair with
--verbose), and does not count a slow cell that nothing is graded in as costing points."""
import copy
import re
import subprocess
import sys

import nbformat
import pytest
from support.notebooks import ROOT, SOLUTIONS, nbgrader_cells, solved, with_answers

from autograder.check import check_notebook, find_release, render, unanswered_questions
from autograder.execution.sandbox import Limits

pytestmark = [pytest.mark.xdist_group("check"), pytest.mark.slow]

ASSIGNMENT = "03_masking"
RELEASE = nbformat.read(ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
CORRECT = solved(RELEASE, nbformat.read(SOLUTIONS / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4))
LIMITS = Limits(cell_timeout=10, total_timeout=300)


def saved_by_colab(notebook):
    """What Colab hands back: no cell metadata, new cell ids."""
    notebook = copy.deepcopy(notebook)
    for i, cell in enumerate(notebook.cells):
        cell.metadata, cell.id = {}, f"colab-{i}"
    return notebook


def test_a_correct_notebook_passes_and_the_command_exits_0(tmp_path):
    path = tmp_path / f"{ASSIGNMENT}.ipynb"
    nbformat.write(CORRECT, path)
    result = subprocess.run([sys.executable, "-m", "autograder", "check", str(path), "--cell-timeout", "30"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    for exercise in ("padding_mask", "causal_mask", "target_mask"):
        assert exercise in result.stdout
    assert "will lose points" not in result.stdout and "repair" not in result.stdout, result.stdout


SLOW_DEMO = "# my own timing demo\nimport time\ntime.sleep(30)"
QUESTION = '"Suppose someone trains the decoder **without** the causal m…" (2 points)'


def test_a_notebook_saved_by_colab_is_matched_to_its_release_and_passes():
    notebook = copy.deepcopy(CORRECT)
    notebook.cells.insert(8, nbformat.v4.new_code_cell(SLOW_DEMO))   # a cell of the student's own, nothing graded
    notebook = saved_by_colab(notebook)
    release = find_release(notebook, "Copy of 03_masking")   # Colab's name says nothing: matched by content
    assert release is not None and release.cells[0].source == RELEASE.cells[0].source
    report = check_notebook(notebook, release, LIMITS)
    text, verbose = render(report), render(report, verbose=True)
    assert report.ok and "will cost points" not in text, text
    assert any("restored the nbgrader metadata" in repair for repair in report.repairs), report.repairs
    assert [(e.name, e.passed, e.cells) for e in report.exercises] == [
        ("padding_mask", 3, 3), ("causal_mask", 4, 4), ("target_mask", 3, 3)]
    # the slow cell, named by its first line; the repairs in one reassuring line, each of them with --verbose
    assert report.slowed == ['the cell that begins "# my own timing demo": CellTimeoutError: the cell ran longer '
                             'than 10 seconds, so it was stopped'], report.slowed
    assert not report.slow and not re.search(r"\bcell \d", text), text
    assert "restored the nbgrader metadata" not in text and "nothing of your work is lost" in text, text
    assert len(text.splitlines()) < 15, text
    assert all(repair in verbose for repair in report.repairs)


def test_unanswered_written_questions_are_named_by_their_text():
    notebook = copy.deepcopy(CORRECT)
    assert unanswered_questions(notebook, RELEASE) == []
    nbgrader_cells(notebook)["written_causal_leak"].source = "YOUR ANSWER HERE"
    assert unanswered_questions(notebook, RELEASE) == [QUESTION]


def test_the_finished_answer_is_refused_a_looping_cell_and_an_unanswered_exercise_are_reported():
    answers, stubs = nbgrader_cells(CORRECT), nbgrader_cells(RELEASE)
    notebook = with_answers(CORRECT, {"causal_mask": "from transformer_course import causal_mask",
                                      "padding_mask": answers["padding_mask"].source + "\nwhile True:\n    pass\n",
                                      "target_mask": stubs["target_mask"].source,
                                      "written_causal_leak": stubs["written_causal_leak"].source})
    report = check_notebook(notebook, RELEASE, LIMITS)
    text = render(report)
    assert not report.ok and "Something above will cost points" in text
    results = {e.name: e for e in report.exercises}
    assert results["causal_mask"].refused and results["causal_mask"].passed == 0, text
    assert not results["padding_mask"].failures, text   # the looping cell defined it before it looped
    assert results["target_mask"].passed == 0 and "NotImplementedError" in results["target_mask"].failures[0], text
    assert any("your padding_mask" in cell and "ran longer than 10 seconds" in cell for cell in report.slow), text
    assert report.unanswered == [QUESTION] and "Written questions not answered yet" in text and QUESTION in text, text


def test_a_notebook_of_another_course_cannot_be_graded(tmp_path):
    stranger = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hello')")])
    path = tmp_path / f"{ASSIGNMENT}.ipynb"
    nbformat.write(stranger, path)
    result = subprocess.run([sys.executable, "-m", "autograder", "check", str(path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1 and "cannot be graded" in result.stdout, result.stdout + result.stderr


def test_the_points_column_says_what_the_failing_tests_cost():
    """Not the exercise's total: the points of its failing visible tests, all of them for a refused answer."""
    from autograder.check import CheckReport, ExerciseResult

    report = CheckReport([ExerciseResult("padding_mask", points=3, cells=3, passed=3),
                          ExerciseResult("causal_mask", points=4, cells=4, passed=3, failing=1,
                                         failures=["test_causal_mask_shape: AssertionError: wrong shape"]),
                          ExerciseResult("target_mask", points=3, cells=3, refused=True, failing=3)], [], [])
    lines = render(report).splitlines()
    assert "points lost" in lines[0] and "at stake" not in lines[0], lines[0]
    rows = {line.split()[0]: line for line in lines[1:] if line and not line.startswith(" ")}
    assert "0 of 3" in rows["padding_mask"] and "ok" in rows["padding_mask"]
    assert "1 of 4" in rows["causal_mask"] and "will lose points" in rows["causal_mask"]
    assert "3 of 3" in rows["target_mask"] and "REFUSED" in rows["target_mask"]
    assert "hidden tests can cost more" in render(report)


def test_a_copy_of_an_earlier_release_is_not_told_it_changed_a_read_only_cell():
    """The package's release changed a test since the student's copy was made: the check says so, not "you changed"."""
    from nbgrader.utils import compute_checksum

    from autograder.check import as_the_grader_gets_it

    current = copy.deepcopy(RELEASE)
    test = nbgrader_cells(current)["test_causal_mask_values"]
    test.source = "assert True, 'a check added later'\n" + test.source
    test.metadata.nbgrader["checksum"] = compute_checksum(test)
    _, repairs = as_the_grader_gets_it(copy.deepcopy(CORRECT), current)
    text = render(report_with(repairs))
    assert any("the tests of causal_mask changed in the current release" in r for r in repairs), repairs
    assert not any(r.startswith("you changed") for r in repairs), repairs
    assert "earlier release" in text and "lost some of its grading metadata" not in text, text
    edited = copy.deepcopy(CORRECT)
    nbgrader_cells(edited)["test_causal_mask_values"].source += "\n# mine"
    _, repairs = as_the_grader_gets_it(edited, RELEASE)
    assert any(r.startswith("you changed the tests of causal_mask") for r in repairs), repairs


def report_with(repairs):
    from autograder.check import CheckReport
    return CheckReport([], repairs, [])
