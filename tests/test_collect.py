"""Collecting from an LMS, as the README says: `nbgrader zip_collect` with the course's configuration, then
`python -m autograder grade`. A Canvas zip (normal, late, re-uploaded and Colab-named files) and a Moodle zip
(a folder per student, and the older flat names) put in one course: every student is collected and graded.

nbgrader's own collector matched the README's old Canvas pattern against each file's absolute path, and
collected nothing; Canvas's late names were skipped and its re-uploads (`-1`) were graded as missing notebooks.
"""
import shutil
import subprocess
import sys
import zipfile

import nbformat
import pytest
from test_grader import CORRECT_ADD, answer, source_notebook

from autograder import CONFIG
from autograder.execution.sandbox import sandbox_available
from autograder.lms import RECORD, StudentRecord, lms_file, notebook_name

pytestmark = pytest.mark.slow   # runs notebooks, kernels or the grader: `-m 'not slow'` leaves it out

ASSIGNMENT = "ps1"
WRONG_ADD = "def add(a, b):\n    return a - b"

# name in the LMS's zip -> (the student id it must be collected as, whether that file is the one to grade)
CANVAS = {
    "smithjane_101_9001_ps1.ipynb": ("smithjane", True),
    "doejohn_late_102_9002_ps1.ipynb": ("doejohn", True),
    "leeann_LATE_103_9003_ps1.ipynb": ("leeann", True),
    "kimbo_104_9004_ps1.ipynb": ("kimbo", False),         # uploaded again: the later upload is graded
    "kimbo_104_9004_ps1-1.ipynb": ("kimbo", True),
    "parkmin_105_9005_ps1-2.ipynb": ("parkmin", True),     # only the re-upload is in the zip
    "nguyenan_106_9006_Copy of ps1.ipynb": ("nguyenan", True),
    # two Canvas users of one name: two students, each collected as the name and their Canvas id
    "smithjohn_11111_50001_ps1.ipynb": ("smithjohn-11111", True),
    "smithjohn_22222_50002_ps1.ipynb": ("smithjohn-22222", True),
    "otherson_107_9007_ps2.ipynb": (None, False),          # another assignment's notebook: not collected
}
MOODLE = {
    "Ana Lima_5001_assignsubmission_file_/ps1.ipynb": ("ana-lima", True),
    "Omar Said_5002_assignsubmission_file_ps1.ipynb": ("omar-said", True),
    "Participant_5003_assignsubmission_file_/ps1 (1).ipynb": ("participant-5003", True),
}


@pytest.mark.parametrize("path, student, name", [
    *[(f"/course/downloaded/ps1/extracted/canvas/{name}", student.split("-")[0], "ps1.ipynb")
      for name, (student, _) in CANVAS.items() if student],
    *[(f"/course/downloaded/ps1/extracted/moodle/{name}", student, "ps1.ipynb") for name, (student, _) in MOODLE.items()],
])
def test_lms_names_give_the_student_and_the_released_notebook(path, student, name):
    found = lms_file(path)
    assert found is not None and found.name == student, found
    assert notebook_name(found.file, {"ps1.ipynb"})[0] == name


def test_the_lms_identity_is_kept():
    canvas = lms_file("/x/doejohn_late_102_9002_ps1.ipynb")
    assert (canvas.lms, canvas.user_id, canvas.late) == ("canvas", "102", True)
    moodle = lms_file("/x/Ana Lima_5001_assignsubmission_file_/ps1.ipynb")
    assert (moodle.lms, moodle.user_id, moodle.full_name, moodle.late) == ("moodle", "5001", "Ana Lima", False)


def test_a_canvas_user_keeps_their_student_id_and_a_later_namesake_gets_their_own(tmp_path):
    record = StudentRecord(tmp_path)
    first = lms_file("/x/smithjohn_11111_50001_ps1.ipynb")
    assert record.student_of(first, namesakes=[]) == "smithjohn"
    record.add("smithjohn", first, "ps1")
    again = StudentRecord(tmp_path)   # the next assignment, read back from the course directory
    assert again.student_of(lms_file("/x/smithjohn_11111_60001_ps2.ipynb"), namesakes=["22222"]) == "smithjohn"
    assert again.student_of(lms_file("/x/smithjohn_22222_60002_ps2.ipynb"), namesakes=["11111"]) == "smithjohn-22222"
    assert again.student_of(lms_file("/x/smithjohn_33333_60003_ps2.ipynb"), namesakes=[]) == "smithjohn-33333"
    assert (tmp_path / RECORD).is_file()


def test_names_of_no_lms_and_unreleased_notebooks_are_left_alone():
    assert lms_file("/course/downloaded/ps1/extracted/ps1.ipynb") is None
    assert lms_file("/course/downloaded/ps1/extracted/my_notes_2.ipynb") is None
    assert notebook_name("scratch.ipynb", {"ps1.ipynb"})[0] == "scratch.ipynb"
    assert notebook_name("ps-1.ipynb", {"ps-1.ipynb"}) == ("ps-1.ipynb", (True, 0))   # a name that ends in -1 itself


def zip_of(path, files):
    with zipfile.ZipFile(path, "w") as archive:
        for name, notebook in files.items():
            archive.writestr(name, nbformat.writes(notebook))


def zip_collect(root, *options):
    return subprocess.run([sys.executable, "-m", "nbgrader", "zip_collect", ASSIGNMENT, *options], cwd=root,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
@pytest.mark.xdist_group("collect")
def test_canvas_and_moodle_zips_are_collected_and_every_student_graded(tmp_path):
    root = tmp_path
    shutil.copy(CONFIG, root / "nbgrader_config.py")     # README, step 1: the course's configuration, unchanged
    (root / "source" / ASSIGNMENT).mkdir(parents=True)
    nbformat.write(source_notebook(), root / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--log-level=ERROR"],
                   cwd=root, check=True, capture_output=True)
    release = nbformat.read(root / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    right, wrong = answer(release, CORRECT_ADD), answer(release, WRONG_ADD)
    archive = root / "downloaded" / ASSIGNMENT / "archive"
    archive.mkdir(parents=True)
    zip_of(archive / "canvas.zip", {name: right if graded else wrong for name, (_, graded) in CANVAS.items()})
    first = zip_collect(root)
    assert first.returncode == 0, first.stderr
    canvas = sorted({student for student, _ in CANVAS.values() if student})
    assert sorted(p.name for p in (root / "submitted").iterdir()) == canvas, first.stderr
    assert "2 Canvas users are named smithjohn (ids 11111, 22222)" in first.stderr
    assert "ps2.ipynb is not a notebook of ps1" in first.stderr
    record = StudentRecord(root)
    assert record.late("ps1") == ["doejohn", "leeann"]
    assert record.students["smithjohn-22222"] == {"lms": "canvas", "user_id": "22222", "name": "smithjohn"}

    # Later, Moodle's zip joins it (say, a second group): the second run needs --force, as the README says.
    zip_of(archive / "moodle.zip", {name: right for name in MOODLE})
    assert zip_collect(root).returncode != 0, "a second run without --force should refuse, as nbgrader does"
    second = zip_collect(root, "--force")
    assert second.returncode == 0, second.stderr
    students = sorted({*canvas, *(student for student, _ in MOODLE.values())})
    for student in students:
        assert (root / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file(), (student, second.stderr)

    graded = subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--workers", "2",
                             "--cell-timeout", "30"], cwd=root, capture_output=True, text=True, timeout=600)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert graded.stdout.strip().splitlines()[-1] == f"{len(students)} graded, 0 failed", graded.stdout
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        assert gradebook.find_student("smithjohn-11111").lms_user_id == "11111"
        assert (gradebook.find_student("ana-lima").first_name, gradebook.find_student("ana-lima").last_name) == \
            ("Ana", "Lima")
        for student in students:
            submission = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
            scores = {g.name: g.score for g in submission.grades if g.cell_type == "code"}
            assert scores == {"test_add": 1, "test_mul": 1}, (student, scores)
