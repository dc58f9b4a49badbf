"""``python -m autograder export ASSIGNMENT --lms canvas|moodle``: the grades, in the file the LMS imports.

It reads ``grades-ASSIGNMENT.csv`` (written by ``grade`` and, after manual grading, ``report``) and the LMS
identities the collector kept (collect.py, ``.autograder/lms-students.json``), and writes one row per student:

* **Canvas** (``canvas-ASSIGNMENT.csv``, for Grades > Import): Canvas's gradebook columns ``Student``, ``ID``
  (the Canvas user id, which the import matches), ``SIS User ID``, ``SIS Login ID``, ``Section``, then one column
  for the assignment, headed with its name in Canvas (``--column``; by default the assignment id), after a
  ``Points Possible`` row;
* **Moodle** (``moodle-ASSIGNMENT.csv``, for the assignment's "Upload grading worksheet"): ``Identifier``
  (``Participant N``, the participant id of that assignment), ``Full name``, ``Grade``, ``Maximum Grade``.

A student's grade is the sum of their notebooks' scores. A student whose submission could not be graded gets
an empty grade (the LMS leaves it as it was), never a zero; students with written answers still awaiting manual
grading, and students the LMS file names did not identify, are named in one line each.
"""
import csv
from dataclasses import dataclass, field
from pathlib import Path

from .lms import StudentRecord


class ExportError(Exception):
    """Nothing to export: no grades CSV, or no student collected from that LMS."""


@dataclass
class Total:
    score: float = 0.0
    max_score: float = 0.0
    failed: bool = False          # a notebook that could not be graded: the grade is left empty
    awaiting_manual: float = 0.0
    notebooks: list = field(default_factory=list)


def read_totals(course, assignment):
    """student -> Total, from grades-ASSIGNMENT.csv."""
    path = Path(course) / f"grades-{assignment}.csv"
    if not path.is_file():
        raise ExportError(f"{path} does not exist: run `python -m autograder grade {assignment}` (or, after manual "
                          f"grading, `python -m autograder report {assignment}`) first")
    totals = {}
    with open(path, newline="", encoding="utf-8") as file:
        for row in csv.DictReader(file):
            total = totals.setdefault(row["student"], Total())
            total.notebooks.append(row["notebook"])
            if row["score"] == "" or row.get("error"):
                total.failed = True
            else:
                total.score += float(row["score"])
            total.max_score += float(row["max_score"] or 0)
            total.awaiting_manual += float(row.get("awaiting_manual") or 0)
    return totals


def _grade(total):
    return "" if total.failed else f"{total.score:g}"


def canvas_rows(assignment, totals, record, column=None):
    """Canvas's gradebook import: (the header and Points Possible rows, {student: their row}) for every student
    Canvas identified."""
    points = max((t.max_score for t in totals.values()), default=0)
    head = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column or assignment],
            ["Points Possible", "", "", "", "", f"{points:g}"]]
    rows = {}
    for student, total in sorted(totals.items()):
        known = record.assignments.get(assignment, {}).get(student) or record.students.get(student)
        if known and known["lms"] == "canvas":
            rows[student] = [student, known["user_id"], "", "", "", _grade(total)]
    return head, rows


def moodle_rows(assignment, totals, record):
    """Moodle's grading worksheet: (the header, {student: their row}) for every student Moodle identified in this
    assignment (a participant id is the assignment's own)."""
    rows = {}
    for student, total in sorted(totals.items()):
        known = record.assignments.get(assignment, {}).get(student)
        if known and known["lms"] == "moodle":
            rows[student] = [f"Participant {known['user_id']}", known.get("full_name", ""), _grade(total),
                             f"{total.max_score:g}"]
    return [["Identifier", "Full name", "Grade", "Maximum Grade"]], rows


def export_grades(course, assignment, lms, column=None, log=print):
    """Write the LMS's import file into the course directory; returns its path."""
    course = Path(course)
    totals = read_totals(course, assignment)
    record = StudentRecord(course)
    head, rows = canvas_rows(assignment, totals, record, column) if lms == "canvas" else \
        moodle_rows(assignment, totals, record)
    if not rows:
        raise ExportError(f"no student of {assignment} was collected from {lms.capitalize()} (its file names carry the "
                          f"ids the import needs): collect with `nbgrader zip_collect {assignment}`")
    path = course / f"{lms}-{assignment}.csv"
    with open(path, "w", newline="", encoding="utf-8") as out:
        csv.writer(out).writerows(head + list(rows.values()))
    _say_left_out(totals, rows, lms, log)
    log(f"wrote {path}: {len(rows)} students")
    return path


def _say_left_out(totals, exported, lms, log):
    failed = sorted(s for s, t in totals.items() if t.failed and s in exported)
    pending = sorted(s for s, t in totals.items() if t.awaiting_manual and not t.failed and s in exported)
    unknown = sorted(set(totals) - set(exported))
    if failed:
        log(f"not graded, so left empty: {', '.join(failed)} (see the error column of the grades CSV)")
    if pending:
        log(f"written answers still await manual grading: {', '.join(pending)} (their grade is without those "
            "points: grade them in the formgrader, then run `report` and export again)")
    if unknown:
        log(f"not identified by {lms.capitalize()}'s file names, so not exported: {', '.join(unknown)}")
