"""One submission cannot break the batch (`python -m autograder grade`): links in a submission are never
followed, oversized files are never read, the kernel's work folder is capped, its connection folder is read-only,
and a submission the grader cannot prepare is an error for that student only. Everybody else is graded and recorded.

One small assignment, one grading run: the students who run a kernel all hand in the solutions, so each must
get full marks; the two whose notebook cannot be used get 0 and a one-line reason.
"""
import copy
import csv
import json
import os
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell
from support.courses import GRADING_ENV, ScratchCourse
from support.notebooks import solved

from autograder.execution.dispatch import MAX_FILE_BYTES, submission_files
from autograder.execution.sandbox import Limits, sandbox_available
from autograder.grade import _fingerprint

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or cannot "
                                 "create namespaces here: apt-get install bubblewrap"),
              pytest.mark.xdist_group("batch_harm"), pytest.mark.slow]

ASSIGNMENT = "01_positional_encoding"
# Appended to every graded notebook: what the kernel's folder holds, and whether a file there has the source
# notebook's hidden tests (the marker is built in the kernel, so that the cell itself does not hold it).
LOOK = ("import os\nfound = [name for name in os.listdir('.') if os.path.isfile(name)\n"
        "         and 'BEGIN HIDDEN ' + 'TESTS' in open(name, errors='replace').read()]\n"
        "print('FILES', sorted(os.listdir('.')), 'HIDDEN', found)")
# Writes up to 1 GiB into the work folder: the cap (Limits.workdir_mb) must stop it in the kernel.
FILL = ("written = 0\ntry:\n    with open('filler.bin', 'wb') as out:\n        while written < 2**30:\n"
        "            out.write(bytes(2**20))\n            written += 2**20\n    print('WROTE', written // 2**20)\n"
        "except OSError as error:\n    print('STOPPED', written // 2**20, error.errno)")
# Tries 1 GiB in the kernel's connection folder (on the host's disk; the kernel sees it read-only), then fails.
SPILL = ("import os\nfrom ipykernel.kernelapp import IPKernelApp\n"
         "folder = os.path.dirname(IPKernelApp.instance().connection_file)\nwritten = 0\ntry:\n"
         "    with open(os.path.join(folder, 'spill.bin'), 'wb') as out:\n        while written < 2**30:\n"
         "            out.write(bytes(2**20))\n            written += 2**20\n    print('SPILLED', written // 2**20, 0)\n"
         "except OSError as error:\n    print('SPILLED', written // 2**20, error.errno)\n    raise")
GRADED = ["good", "dangling", "linker", "hoarder", "writer", "spiller"]   # their notebooks run: full marks each
REFUSED = ["impostor", "borrower"]                               # their notebook is a link: nothing to grade


def sparse(path, size=8 * 2**30):
    """An 8 GB file that takes no disk: only reading it would cost the time and the memory."""
    with open(path, "wb") as file:
        file.truncate(size)


def submit(course, student, notebook, *extra_cells):
    folder = course.path("submitted", student).parent
    notebook = copy.deepcopy(notebook)
    notebook.cells += [new_code_cell(source) for source in (LOOK, *extra_cells)]
    course.submit(student, notebook)
    return folder


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = ScratchCourse(tmp_path_factory.mktemp("harm"), ASSIGNMENT)
    answers = solved(course.release, course.solution)
    source = course.path("source")
    good = submit(course, "good", answers)
    (good / "data.txt").write_text("the student's own file")
    os.symlink(course.root / "nowhere.txt", submit(course, "dangling", answers) / "ghost.txt")
    linker = submit(course, "linker", answers)
    os.symlink(source, linker / "notes.txt")                   # the instructor's notebook, hidden tests and all
    os.symlink(source.parent, linker / "peek")                 # and its folder
    sparse(submit(course, "hoarder", answers) / "weights.bin")
    submit(course, "writer", answers, FILL)
    submit(course, "spiller", answers, SPILL)
    impostor = course.path("submitted", "impostor")
    impostor.parent.mkdir(parents=True)
    os.symlink(source, impostor)                               # would grade the instructor's solutions
    (course.root / "submitted" / "borrower").mkdir()
    os.symlink(good, course.root / "submitted" / "borrower" / ASSIGNMENT)   # another student's folder
    result = subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--workers", "2"],
                            cwd=course.root, env=GRADING_ENV, capture_output=True, text=True, timeout=600)
    # the two whose folder is a link cannot be graded: the run says so and exits 1, the others are graded
    assert result.returncode == 1 and "6 graded, 2 failed: borrower, impostor" in result.stdout, \
        f"the grader should grade 6 and fail 2:\n{result.stdout}\n{result.stderr}"
    return course


def rows(course):
    return {r["student"]: r for r in csv.DictReader(open(course.root / f"grades-{ASSIGNMENT}.csv"))}


def report(course, student):
    reports = json.loads((course.root / ".autograder" / ASSIGNMENT / "report.json").read_text())
    return reports[student][ASSIGNMENT]


def printed(course, student, marker):
    """The line the kernel printed that starts with `marker`, from the student's executed notebook."""
    executed = nbformat.read(course.root / ".autograder" / ASSIGNMENT / "executed" / student / ASSIGNMENT /
                             f"{ASSIGNMENT}.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    return next((line for line in text.splitlines() if line.startswith(marker)), f"no {marker} line in: {text[-300:]}")


def test_every_other_student_is_graded_with_full_marks(course):
    table = rows(course)
    assert sorted(table) == sorted(GRADED + REFUSED)
    for student in GRADED:
        row = table[student]
        # every autograded point; the written answer awaits the instructor
        assert float(row["score"]) + float(row["awaiting_manual"]) == float(row["max_score"]) > 0, row
        assert float(row["score"]) > 0 and not row["error"], row


@pytest.mark.parametrize("student", REFUSED)
def test_a_linked_notebook_or_folder_is_an_error_in_one_line(course, student):
    row = rows(course)[student]
    assert float(row["score"] or 0) == 0, row
    assert "symbolic link" in row["error"] and "\n" not in row["error"], row


@pytest.mark.parametrize("student, name, why", [("dangling", "ghost.txt", "symbolic link"),
                                                ("linker", "notes.txt", "symbolic link"),
                                                ("linker", "peek", "symbolic link"),
                                                ("hoarder", "weights.bin", f"over the {MAX_FILE_BYTES // 2**20} MB")])
def test_what_is_left_out_is_reported_for_that_student(course, student, name, why):
    lines = [line for line in report(course, student)["skipped"] if line.startswith(f"{name} ")]
    assert len(lines) == 1 and why in lines[0] and "\n" not in lines[0], report(course, student)


def test_links_never_reach_the_kernel_or_the_staging_folders(course):
    assert printed(course, "good", "FILES") == "FILES ['data.txt'] HIDDEN []"
    for student in ("dangling", "linker", "hoarder"):
        assert printed(course, student, "FILES") == "FILES [] HIDDEN []", student
    staged = [p for p in (course.root / ".autograder").rglob("*") if p.is_symlink() or p.name in
              ("notes.txt", "peek", "ghost.txt", "weights.bin")]
    assert staged == []


def test_writing_past_the_cap_fails_in_the_kernel(course):
    line = printed(course, "writer", "STOPPED")
    assert line.startswith("STOPPED"), line     # "WROTE 1024": the whole GiB went to the host's disk
    _, megabytes, errno = line.split()
    assert int(megabytes) <= Limits.workdir_mb and int(errno) == 28    # ENOSPC, in the kernel's tmpfs


def test_the_kernels_connection_folder_is_read_only(course):
    """The folder of its connection file is on the host's disk: the kernel cannot write there (its sockets are in a
    tmpfs of their own), the cell fails, and the notebook is graded (test_every_other_student_...)."""
    assert printed(course, "spiller", "SPILLED") == "SPILLED 0 30"     # EROFS: nothing reached the disk


def test_listing_and_fingerprint_read_no_link_and_no_oversized_file(tmp_path):
    folder = tmp_path / "submission"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "kept.txt").write_text("kept")
    sparse(folder / "huge.bin")
    os.symlink("/etc/passwd", folder / "sub" / "link.txt")
    os.mkfifo(folder / "pipe")
    files, skipped = submission_files(folder)
    assert list(files) == ["sub/kept.txt"]
    assert sorted(skipped) == ["huge.bin", "pipe", "sub/link.txt"]
    before = _fingerprint(files, skipped)
    (folder / "sub" / "kept.txt").write_text("changed")
    assert _fingerprint(*submission_files(folder)) != before
