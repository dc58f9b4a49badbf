"""A second grading after resubmissions, submissions that cannot be graded, and what the grader tells the instructor
(issue 50), on the tiny problem set of test_grader.py.

The course: three students answer the written question and have it graded by hand; then the instructor changes a
test and releases the assignment again (`nbgrader generate_assignment --force`), the students resubmit, copies of
the earlier release, and everybody is graded again. "keeper" changed code but not the written answer: the hand grade
survives. "changer" rewrote the written answer: it waits for a person everywhere (CSV, `report`, feedback page,
formgrader), and its earlier grade is set aside. "reverted" resubmits a corrupt notebook: the earlier hand grade is
set aside and no grade stays. Every failure (not JSON, another assignment's notebook, a missing notebook, a failed
execution, a failed record) has an empty score, the notebook's max_score, a log, and a feedback page saying why.
The course states its per-cell time limit once, in its nbgrader_config.py, and `grade` uses it.
"""
import csv
import json
import shutil
import subprocess
import sys

import nbformat
import pytest
from support.courses import ScratchCourse, worker_nbgrader
from support.notebooks import ROOT, nbgrader_cells
from test_grader import ASSIGNMENT, CORRECT_ADD, WRITTEN, answer, source_notebook

from autograder.__main__ import main
from autograder.execution.sandbox import CELL_TIMEOUT, Limits, configured_cell_timeout, sandbox_available

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or cannot "
                                   "create namespaces here: apt-get install bubblewrap")


def on_the_course(test):
    """A test of the graded course below: slow, sandboxed, in one pytest-xdist worker (the quick tests at the end
    are not)."""
    for mark in (pytest.mark.slow, needs_sandbox, pytest.mark.xdist_group("regrading")):
        test = mark(test)
    return test

CELL_SECONDS = 45     # the course's c.Execute.timeout: grade's limit per cell when it is not given one
MANUAL = {"keeper": (1.5, "Right, but name the method."), "changer": (2.0, "Exactly."),
          "reverted": (1.0, "Half of it.")}
REWRITTEN = "Because I said so."
FAILED = ["corrupt", "missing", "reverted", "stranger"]
NEW_TEST = 'assert mul(3, 4) == 12, "mul(3, 4) should be 12"\n'    # the instructor's change to test_mul


def run(root, *args):
    done = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=root, capture_output=True, text=True,
                          timeout=900)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


def grade_by_hand(root, marks):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        for student, (score, comment) in marks.items():
            grade = gradebook.find_grade("why_add", ASSIGNMENT, ASSIGNMENT, student)
            grade.manual_score, grade.needs_manual_grade = score, False
            gradebook.find_comment("why_add", ASSIGNMENT, ASSIGNMENT, student).manual_comment = comment
        gradebook.db.commit()


def submit_broken(scratch, root):
    """corrupt: not JSON; missing: no notebook at all; stranger: another assignment's notebook."""
    (root / "submitted" / "corrupt" / ASSIGNMENT).mkdir(parents=True)
    (root / "submitted" / "corrupt" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text('{"cells": [')
    (root / "submitted" / "missing" / ASSIGNMENT).mkdir(parents=True)
    (root / "submitted" / "missing" / ASSIGNMENT / "notes.txt").write_text("I forgot the notebook")
    scratch.submit("stranger", nbformat.read(ROOT / "notebooks" / "03_masking" / "03_masking.ipynb", as_version=4))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("regrade")
    scratch = ScratchCourse(root, ASSIGNMENT, source=source_notebook(), config=f"\nc.Execute.timeout = {CELL_SECONDS}\n")
    old_release = scratch.release
    for student in MANUAL:
        scratch.submit(student, answer(old_release, CORRECT_ADD, written=WRITTEN))
    submit_broken(scratch, root)
    first = run(root, "grade", ASSIGNMENT, "--workers", "2")
    assert first.returncode == 1, first.stdout + first.stderr
    grade_by_hand(root, MANUAL)
    # The instructor adds a visible test to test_mul and releases the assignment again.
    source = nbformat.read(scratch.path("source"), as_version=4)
    nbgrader_cells(source)["test_mul"].source = NEW_TEST + nbgrader_cells(source)["test_mul"].source
    nbformat.write(source, scratch.path("source"))
    scratch.nbgrader("generate_assignment", ASSIGNMENT, "--force")
    # The students resubmit copies of the earlier release.
    scratch.submit("keeper", answer(old_release, "def add(a, b):\n    return a - b", written=WRITTEN + "\n"))
    scratch.submit("changer", answer(old_release, CORRECT_ADD, written=REWRITTEN))
    (root / "submitted" / "reverted" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text("not a notebook")
    second = run(root, "grade", ASSIGNMENT, "--workers", "2")
    assert second.returncode == 1, second.stdout + second.stderr
    report = run(root, "report", ASSIGNMENT)
    feedback = run(root, "feedback", ASSIGNMENT)
    assert report.returncode == 0 and feedback.returncode == 0, report.stderr + feedback.stderr
    return {"root": root, "first": first.stdout, "second": second.stdout, "report": report.stdout,
            "feedback": feedback.stdout}


def gradebook_cell(root, student, cell="why_add"):
    """(manual_score, needs_manual_grade, manual_comment, score) of one cell."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        grade = gradebook.find_grade(cell, ASSIGNMENT, ASSIGNMENT, student)
        comment = gradebook.find_comment(cell, ASSIGNMENT, ASSIGNMENT, student)
        return grade.manual_score, grade.needs_manual_grade, comment.manual_comment, grade.score


def rows(root, suffix=""):
    return list(csv.DictReader(open(root / f"grades-{ASSIGNMENT}{suffix}.csv")))


def page(root, student):
    return (root / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()


@on_the_course
def test_an_unchanged_written_answer_keeps_its_hand_grade_after_a_regrade(course):
    root = course["root"]
    assert gradebook_cell(root, "keeper") == (1.5, False, MANUAL["keeper"][1], 1.5)
    totals = {r["student"]: r for r in rows(root)}
    assert float(totals["keeper"]["awaiting_manual"]) == 0
    assert float(totals["keeper"]["score"]) == 1 + 1.5        # its add is wrong now, its mul right, 1.5 by hand
    keeper = page(root, "keeper")
    assert "1.5 / 2" in keeper and "Right, but name the method." in keeper and "awaiting" not in keeper
    assert "keeper" not in course["report"].split("still to grade by hand")[1].splitlines()[0]


@on_the_course
def test_a_changed_written_answer_waits_for_a_person_everywhere(course):
    root = course["root"]
    assert gradebook_cell(root, "changer")[:3] == (None, True, None)      # the formgrader's "needs manual grade"
    totals = {r["student"]: r for r in rows(root)}
    assert float(totals["changer"]["awaiting_manual"]) == 2 and float(totals["changer"]["score"]) == 2
    cells = {(r["student"], r["cell"]): r for r in rows(root, "-cells")}
    assert cells["changer", "why_add"]["score"] == "" and float(cells["changer", "why_add"]["awaiting_manual"]) == 2
    changer = page(root, "changer")
    assert "awaiting manual grading" in changer and "Exactly." not in changer and "2 / 2" not in changer
    assert "1 with written answers still to grade by hand: changer (ps1/why_add)" in course["report"], course["report"]
    assert "changer: why_add was graded by hand (2 of 2) and its answer changed: it waits for grading by hand " \
           "again" in course["second"], course["second"]
    earlier = json.loads((root / ".autograder" / ASSIGNMENT / "earlier-manual-grades.json").read_text())
    kept = {(e["student"], e["cell"]): e for e in earlier}
    assert kept["changer", "why_add"]["manual_score"] == 2 and kept["changer", "why_add"]["manual_comment"] == "Exactly."
    assert kept["reverted", "why_add"]["manual_score"] == 1 and "could not be graded" in kept["reverted", "why_add"]["why"]
    assert ("keeper", "why_add") not in kept


@on_the_course
def test_a_failed_submission_is_no_zero_and_has_a_log_and_a_page_that_says_why(course):
    root = course["root"]
    totals = {r["student"]: r for r in rows(root)}
    assert course["second"].strip().splitlines()[-1].startswith(f"2 graded, {len(FAILED)} failed: {', '.join(FAILED)}")
    for student in FAILED:
        row = totals[student]
        assert row["score"] == "" and float(row["max_score"]) == 4 and row["error"], row
        log = root / ".autograder" / ASSIGNMENT / "logs" / f"{student}.txt"
        assert log.exists() and row["error"] in log.read_text(), student
        shown = page(root, student)
        assert "This notebook could not be graded" in shown and "Score: <b>none</b>" in shown, student
        assert " / 4" not in shown and "0 / 0" not in shown, student
    assert "is missing from the submission" in totals["missing"]["error"]
    assert f"{len(FAILED)} of them say why the notebook could not be graded, so that it has no grade " \
           f"({', '.join(FAILED)})" in course["feedback"], course["feedback"]
    from nbgrader.api import Gradebook, MissingEntry
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook, pytest.raises(MissingEntry):
        gradebook.find_submission(ASSIGNMENT, "reverted")    # no grade of the earlier submission stays


@on_the_course
def test_a_copy_of_an_earlier_release_is_not_called_damaged(course):
    for student in ("keeper", "changer"):
        shown = page(course["root"], student)
        assert "released again after your copy of it was made" in shown and "was damaged" not in shown, shown


@on_the_course
def test_grade_takes_its_cell_limit_from_the_course_configuration(course):
    for run_output in (course["first"], course["second"]):
        assert f"sandboxed; {CELL_SECONDS} s per cell, {Limits().total_timeout:g} s per notebook" in run_output


@on_the_course
def test_a_failed_execution_or_record_leaves_no_grade_and_a_log(course):
    """The paths a subprocess cannot reach: the worker's execution fails, or nbgrader cannot record."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograder.grade import _Batch

    root = course["root"]
    release = nbformat.read(root / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    for student in ("lost", "unrecorded"):
        (root / "submitted" / student / ASSIGNMENT).mkdir(parents=True)
        nbformat.write(answer(release, CORRECT_ADD), root / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")

    class Failed:
        def result(self):
            raise RuntimeError("the worker died")

    lines = []
    batch = _Batch(root, ASSIGNMENT, root / "release" / ASSIGNMENT, ["lost", "unrecorded"], lines.append)
    assert batch.prepare("lost") is not None and batch.prepare("unrecorded") is not None
    batch.record("lost", batch.take("lost", Failed()))
    batch.record_step = lambda assignment, student: "ValueError: the gradebook is locked"
    batch.record("unrecorded", True)
    for student, why in (("lost", "RuntimeError('the worker died')"), ("unrecorded", "the gradebook is locked")):
        error = batch.reports[student][ASSIGNMENT].error
        assert why in error, error
        log = (root / ".autograder" / ASSIGNMENT / "logs" / f"{student}.txt").read_text()
        assert error in log, log
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook, pytest.raises(MissingEntry):
            gradebook.find_submission(ASSIGNMENT, student)     # never zeros for cells that did not run
    assert "Traceback" in (root / ".autograder" / ASSIGNMENT / "logs" / "lost.txt").read_text()


@on_the_course
def test_a_typo_in_the_assignment_lists_the_known_ones(course, refused):
    line = refused(main, ["grade", "ps2", "--course", str(course["root"])])
    assert "no assignment 'ps2' (it has: ps1)" in line and "generate_assignment ps2" not in line, line


@on_the_course
@pytest.mark.parametrize("command", ["grade", "report"])
def test_a_deleted_gradebook_gives_a_command_that_records_the_assignment_again(course, tmp_path, refused, command):
    copied = tmp_path / "course"
    shutil.copytree(course["root"], copied)
    (copied / "gradebook.db").unlink()
    line = refused(main, [command, ASSIGNMENT, "--course", str(copied)])
    assert f"`nbgrader generate_assignment {ASSIGNMENT} --force`" in line, line
    worker_nbgrader().run(["generate_assignment", ASSIGNMENT, "--force", "--log-level=ERROR"], copied)
    from autograder.grade import check_assignment
    check_assignment(copied, ASSIGNMENT)      # the gradebook knows the assignment again


# ----------------------------------------------------------------------------- quick: no grading run

def test_nbgrader_stops_a_notebooks_kernel_at_once_under_the_course_configuration():
    """nbgrader reads the setting under its own name: a misspelt one would leave its default, a wait of 2-3 s a notebook."""
    from nbgrader.preprocessors import Execute
    from traitlets.config.loader import PyFileConfigLoader

    from autograder import CONFIG

    config = PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()
    assert Execute().shutdown_kernel == "graceful" and Execute(config=config).shutdown_kernel == "immediate"


def test_the_cell_time_limit_is_stated_once_in_the_course_configuration(tmp_path):
    from autograder import CONFIG
    from autograder.grade import course_cell_timeout

    assert configured_cell_timeout(CONFIG) == CELL_TIMEOUT == Limits().cell_timeout
    config = CONFIG.read_text()
    assert config.count("c.Execute.timeout =") == 1
    assert f"c.Execute.timeout = {CELL_TIMEOUT:g}" in config
    for own, expected in (("", CELL_TIMEOUT), ("\nc.Execute.timeout = 77\n", 77.0), ("\nc.Execute.timeout = -1\n", None)):
        (tmp_path / "nbgrader_config.py").write_text(config + own)
        assert course_cell_timeout(tmp_path) == expected, own
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")    # a course that does not set it
    assert course_cell_timeout(tmp_path) == CELL_TIMEOUT
    help_text = subprocess.run([sys.executable, "-m", "autograder", "grade", "--help"], capture_output=True,
                               text=True, timeout=120).stdout
    assert "c.Execute.timeout" in " ".join(help_text.split()), help_text
