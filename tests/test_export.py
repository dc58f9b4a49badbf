"""``python -m autograder export``: the grades CSV and the LMS ids kept at collection, as Canvas's gradebook import and
Moodle's grading worksheet read them."""
import csv

from autograder.__main__ import main
from autograder.lms import StudentRecord, lms_file

ASSIGNMENT = "ps1"
COLUMNS = ["student", "notebook", "score", "max_score", "seconds", "repairs", "broken_cells", "error",
           "awaiting_manual", "red_flags"]


def course_with(tmp_path, rows, files):
    """A course directory with grades-ps1.csv (``rows``: student -> (score, max, error, awaiting)) and the
    collector's record of ``files`` (LMS file names -> student id)."""
    with open(tmp_path / f"grades-{ASSIGNMENT}.csv", "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for student, (score, top, error, awaiting) in rows.items():
            writer.writerow([student, "ps1", score, top, 1.0, 0, 0, error, awaiting, 0])
    record = StudentRecord(tmp_path)
    for name, student in files.items():
        record.add(student, lms_file(f"/x/{name}"), ASSIGNMENT)
    return tmp_path


def read(path):
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


def test_canvas_import_has_canvas_columns_ids_and_no_zero_for_a_failed_submission(tmp_path, capsys):
    course = course_with(tmp_path, {"smithjohn-11111": (7.5, 10, "", 0), "smithjohn-22222": ("", 10, "broken", 0),
                                    "leeann": (6, 10, "", 2), "walkin": (5, 10, "", 0)},
                         {"smithjohn_11111_501_ps1.ipynb": "smithjohn-11111",
                          "smithjohn_22222_502_ps1.ipynb": "smithjohn-22222",
                          "leeann_late_103_503_ps1.ipynb": "leeann"})
    assert main(["export", ASSIGNMENT, "--lms", "canvas", "--course", str(course), "--column", "PS 1 (4242)"]) == 0
    rows = read(course / f"canvas-{ASSIGNMENT}.csv")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "PS 1 (4242)"]
    assert rows[1] == ["Points Possible", "", "", "", "", "10"]
    assert rows[2:] == [["leeann", "103", "", "", "", "6"], ["smithjohn-11111", "11111", "", "", "", "7.5"],
                        ["smithjohn-22222", "22222", "", "", "", ""]]
    said = capsys.readouterr().out
    assert "left empty: smithjohn-22222" in said and "await manual grading: leeann" in said
    assert "not exported: walkin" in said


def test_moodle_worksheet_uses_the_assignments_participant_ids(tmp_path):
    course = course_with(tmp_path, {"ana-lima": (9, 10, "", 0)},
                         {"Ana Lima_5001_assignsubmission_file_/ps1.ipynb": "ana-lima"})
    assert main(["export", ASSIGNMENT, "--lms", "moodle", "--course", str(course)]) == 0
    assert read(course / f"moodle-{ASSIGNMENT}.csv") == [["Identifier", "Full name", "Grade", "Maximum Grade"],
                                                         ["Participant 5001", "Ana Lima", "9", "10"]]


def test_nothing_to_export_is_refused_in_one_line(tmp_path, capsys):
    assert main(["export", ASSIGNMENT, "--lms", "canvas", "--course", str(tmp_path)]) == 2
    assert "python -m autograder grade ps1" in capsys.readouterr().err
    course = course_with(tmp_path, {"ana-lima": (9, 10, "", 0)}, {})
    assert main(["export", ASSIGNMENT, "--lms", "canvas", "--course", str(course)]) == 2
    assert "nbgrader zip_collect ps1" in capsys.readouterr().err
