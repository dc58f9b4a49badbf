"""`python -m autograder grade`, `feedback` and `report` on a course of hostile students.

A tiny assignment (two exercises, visible and hidden tests, a written answer) keeps this quick; each student
breaks one exercise in one way, so every case checks both halves of the promise: zero where the submission
broke things, full marks for the rest, and a batch that always completes. The course keeps its gradebook
where its nbgrader_config.py says (not the default gradebook.db), grades one student in a second run
(`--student`), and has one written answer graded by hand, after which `report` writes the CSVs again. Two
submissions cannot be graded at all (a corrupt notebook, another assignment's): the run says "N graded, M
failed", exits 1, and prints no traceback. Bad input (no course configuration, an unknown assignment or
student) is refused in one line, with exit status 2, leaving nothing behind. The last test grades a real
assignment of the course, to check that the grader agrees with the notebooks' own tests.
"""
import copy
import csv
import html
import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from support.courses import ScratchCourse
from support.notebooks import ROOT, SOLUTIONS, answer_ids, colab, nbgrader_cell, nbgrader_cells, solved, with_answers

from autograder.__main__ import main
from autograder.execution.sandbox import sandbox_available

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or cannot "
                                 "create namespaces here: apt-get install bubblewrap"),
              pytest.mark.xdist_group("grader"), pytest.mark.slow]

ASSIGNMENT = "ps1"
DATABASE = "other.db"   # the course's gradebook, set in its nbgrader_config.py
HIDDEN_LINE = 'assert torch.allclose(add(torch.ones(2), torch.ones(2)), 2 * torch.ones(2)), "add is wrong for tensors"'


def source_notebook():
    return new_notebook(cells=[
        new_markdown_cell("# Problem set 1\nAdd and multiply."),
        nbgrader_cell(new_markdown_cell("Answer the question at the end in words."), "instructions"),
        nbgrader_cell(new_code_cell("import torch"), "imports"),
        nbgrader_cell(new_code_cell("def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION"),
               "add", solution=True),
        nbgrader_cell(new_code_cell("assert add(1, 2) == 3, \"add(1, 2) should be 3\"\n### BEGIN HIDDEN TESTS\n"
                             f"{HIDDEN_LINE}\n### END HIDDEN TESTS"), "test_add", grade=True, points=1),
        nbgrader_cell(new_code_cell("def mul(a, b):\n    ### BEGIN SOLUTION\n    return a * b\n    ### END SOLUTION"),
               "mul", solution=True),
        nbgrader_cell(new_code_cell("assert mul(2, 3) == 6, \"mul(2, 3) should be 6\"\n### BEGIN HIDDEN TESTS\n"
                             "assert isinstance(mul(2, 3), int), \"mul of two ints should be an int\"\n"
                             "assert not torch.allclose(torch.zeros(1), torch.ones(1))\n### END HIDDEN TESTS"),
               "test_mul", grade=True, points=1),
        nbgrader_cell(new_markdown_cell("Why does `add` work on tensors too?\n\n### BEGIN SOLUTION\n`+` calls `__add__`, "
                                 "which tensors define.\n### END SOLUTION"), "why_add", solution=True, grade=True,
               points=2),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


CORRECT_ADD = "def add(a, b):\n    return a + b"
CORRECT_MUL = "def mul(a, b):\n    return a * b"

# student -> (source of the add cell, why it is there): the mul cell stays correct, so it must keep its point
HOSTILE_ADD = {
    "good": CORRECT_ADD,
    "looper": "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except KeyboardInterrupt:\n        pass",
    "killer": CORRECT_ADD + "\nimport os\nos.kill(os.getpid(), 9)",
    # the cell breaks before it defines add (a MemoryError or an interrupt ends it)
    "hog": "hoard = []\nwhile True:\n    hoard.append(bytearray(10**8))\n" + CORRECT_ADD,
    "chatty": "while True:\n    print('spam ' * 100)\n" + CORRECT_ADD,
    # right for ints (the visible test), wrong for tensors (the hidden one)
    "ints_only": "def add(a, b):\n    return a + b if isinstance(a, int) else a * b",
    "leaker": "def add(a, b):\n    raise AssertionError(get_ipython().user_ns['In'][-1])",
    # wrong, and the kernel made not to show errors: its reply still says the test failed (tests/test_error_hiding.py
    # has more such tricks; a trick the reply does not show passes a plain assert cell, as in plain nbgrader)
    "hider": "def add(a, b):\n    return a - b\n"
             "get_ipython().set_custom_exc((BaseException,), lambda shell, etype, value, tb, tb_offset=None: [])",
    "snoop": CORRECT_ADD + "\nimport os\n"
             "seen = [p for p in ['{course}', '{repo}/solutions'] if os.path.exists(p)]\n"
             "print('FOUND', seen)\n"
             "for path in ['{course}/gradebook.db', '{course}/source/ps1/ps1.ipynb', '{course}/submitted/good/ps1/ps1.ipynb']:\n"
             "    try:\n        open(path).read(1)\n        print('READ', path)\n    except OSError:\n        pass\n"
             "try:\n    open('{course}/pwned.txt', 'w').write('x')\nexcept OSError:\n    pass",
}


WRITTEN = "Tensors define `__add__`, so `+` adds them element by element."
ANSWERED = {"good", "colab"}     # the students who answer the written question; the others leave it as released
MANUAL = {"good": (1.5, "Right, but name the method: `__add__`.")}   # graded by hand before the feedback


def answer(release, add_source, mul_source=CORRECT_MUL, written=None):
    notebook = copy.deepcopy(release)
    cells = nbgrader_cells(notebook)
    cells["add"].source, cells["mul"].source = add_source, mul_source
    if written is not None:
        cells["why_add"].source = written
    return notebook


UNGRADABLE = ["corrupt", "stranger"]   # a notebook that is not JSON; another assignment's notebook


def grade(root, *students, failed=()):
    """One grading run; it must end with "N graded, M failed", exit 1 when M > 0, and print no traceback and
    none of nbgrader's SQLAlchemy warnings."""
    result = subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--workers", "2",
                             "--cell-timeout", "8", "--memory", "3072", "--output", "20000",
                             *(f"--student={s}" for s in students)],
                            cwd=root, capture_output=True, text=True, timeout=600)
    printed = f"{result.stdout}\n{result.stderr}"
    assert result.returncode == (1 if failed else 0), f"the grader failed:\n{printed}"
    summary = f"{len(students) - len(failed)} graded, {len(failed)} failed"
    assert result.stdout.strip().splitlines()[-1].startswith(summary), printed
    assert all(student in result.stdout.strip().splitlines()[-1] for student in failed), printed
    assert "Traceback" not in printed and "SAWarning" not in printed, printed
    # ps1's test cells are plain assert cells: the grader says that their verdict is the kernel's word
    assert "autograder: 2 test cells of ps1 are not written as probe and judge (test_add, test_mul): their verdict " \
           "is the kernel's word, as in plain nbgrader" in result.stdout, printed


def grade_by_hand(root, marks):
    """What a grader does in the formgrader: a score and a comment for the written answer."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / DATABASE}") as gradebook:
        for student, (score, comment) in marks.items():
            grade = gradebook.find_grade("why_add", ASSIGNMENT, ASSIGNMENT, student)
            grade.manual_score, grade.needs_manual_grade = score, False
            gradebook.find_comment("why_add", ASSIGNMENT, ASSIGNMENT, student).manual_comment = comment
        gradebook.db.commit()


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    scratch = ScratchCourse(root, ASSIGNMENT, source=source_notebook(),
                            config=f'\nc.CourseDirectory.db_url = "sqlite:///{root / DATABASE}"\n')
    release = scratch.release
    submissions = {s: answer(release, src.format(course=root, repo=ROOT), written=WRITTEN if s in ANSWERED else None)
                   for s, src in HOSTILE_ADD.items()}
    submissions["colab"] = colab(answer(release, CORRECT_ADD, written=WRITTEN))
    submissions["stranger"] = nbformat.read(ROOT / "notebooks" / "01_positional_encoding" / "01_positional_encoding.ipynb",
                                            as_version=4)
    for student, notebook in submissions.items():
        scratch.submit(student, notebook, timestamp="2026-11-20 12:00:00.000000 UTC")
    corrupt = root / "submitted" / "corrupt" / ASSIGNMENT
    corrupt.mkdir(parents=True)
    (corrupt / f"{ASSIGNMENT}.ipynb").write_text('{"cells": [')
    grade(root, *(s for s in [*submissions, "corrupt"] if s != "good"), failed=UNGRADABLE)
    # An earlier version's `--student zoe` (no such folder) left a row for zoe: no later run may keep it.
    report = root / ".autograder" / ASSIGNMENT / "report.json"
    reports = json.loads(report.read_text())
    report.write_text(json.dumps({**reports, "zoe": {ASSIGNMENT: {**reports["colab"][ASSIGNMENT], "error": "phantom"}}}))
    grade(root, "good")     # a second run for one student: the others' rows, reports and files stay
    grade_by_hand(root, MANUAL)
    shutil.copy(root / f"grades-{ASSIGNMENT}.csv", root / "before-report.csv")
    done = subprocess.run([sys.executable, "-m", "autograder", "report", ASSIGNMENT], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "corrupt, stranger" in done.stdout, done.stdout + done.stderr
    feedback = subprocess.run([sys.executable, "-m", "autograder", "feedback", ASSIGNMENT],
                              cwd=root, capture_output=True, text=True, timeout=300)
    assert feedback.returncode == 0, f"feedback failed:\n{feedback.stdout}\n{feedback.stderr}"
    return root


def cell_scores(course, student):
    """grade_id -> score of the autograded test cells."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / DATABASE}") as gradebook:
        submission = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
        return {g.name: g.score for g in submission.grades if g.cell_type == "code"}


def test_the_gradebook_is_where_the_course_configuration_puts_it(course):
    assert (course / DATABASE).exists() and not (course / "gradebook.db").exists()


def test_a_correct_submission_gets_full_marks(course):
    assert cell_scores(course, "good") == {"test_add": 1, "test_mul": 1}


@pytest.mark.parametrize("student", ["looper", "killer", "hog", "chatty"])
def test_a_broken_cell_costs_its_own_points_only(course, student):
    scores = cell_scores(course, student)
    assert scores["test_add"] == 0, f"{student} broke its add cell but kept the point"
    assert scores["test_mul"] == 1, f"{student}'s correct mul lost its point: the batch did not recover"


def test_a_hidden_test_catches_what_the_visible_one_missed(course):
    assert cell_scores(course, "ints_only") == {"test_add": 0, "test_mul": 1}


def test_hiding_errors_from_the_kernel_gains_nothing(course):
    scores = cell_scores(course, "hider")
    assert scores["test_add"] == 0, "the wrong add kept its point by hiding the error"
    assert scores["test_mul"] == 1, "the correct mul lost its point"


def test_a_submission_sees_nothing_outside_its_folder(course):
    executed = nbformat.read(course / ".autograder" / ASSIGNMENT / "executed" / "snoop" / ASSIGNMENT /
                             f"{ASSIGNMENT}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for o in nbgrader_cells(executed)["add"].outputs)
    assert "FOUND []" in printed, f"the sandbox shows other files: {printed[:500]}"
    assert "READ" not in printed, f"the sandbox let the submission read: {printed[:500]}"
    assert not (course / "pwned.txt").exists(), "the submission wrote into the course directory"
    assert cell_scores(course, "snoop") == {"test_add": 1, "test_mul": 1}


def test_colab_metadata_is_repaired(course):
    assert cell_scores(course, "colab") == {"test_add": 1, "test_mul": 1}
    rows = {(r["student"], r["notebook"]): r for r in csv.DictReader(open(course / f"grades-{ASSIGNMENT}.csv"))}
    assert int(rows["colab", ASSIGNMENT]["repairs"]) > 0, "the CSV does not say the notebook was repaired"
    assert int(rows["good", ASSIGNMENT]["repairs"]) == 0, "an intact notebook was reported as repaired"


def test_an_unmatchable_notebook_is_an_error_for_that_student_only(course):
    rows = {(r["student"], r["notebook"]): r for r in csv.DictReader(open(course / f"grades-{ASSIGNMENT}.csv"))}
    assert "does not look like" in rows["stranger", ASSIGNMENT]["error"], rows["stranger", ASSIGNMENT]
    assert float(rows["stranger", ASSIGNMENT]["score"] or 0) == 0
    assert float(rows["good", ASSIGNMENT]["score"]) == 3.5 and not rows["good", ASSIGNMENT]["error"]  # 1.5 by hand


def test_the_csv_has_every_student(course):
    """Also after the second run, which graded only "good": the first run's rows are kept, and no row of a
    student without a submission."""
    rows = list(csv.DictReader(open(course / f"grades-{ASSIGNMENT}.csv")))
    assert sorted(r["student"] for r in rows) == sorted([*HOSTILE_ADD, "colab", *UNGRADABLE])


def test_a_submission_that_cannot_be_read_is_an_error_in_its_row(course):
    rows = {r["student"]: r for r in csv.DictReader(open(course / f"grades-{ASSIGNMENT}.csv"))}
    # never a 0 that an LMS would import: the score is empty, the error says why
    assert "could not be read" in rows["corrupt"]["error"] and rows["corrupt"]["score"] == ""
    assert "\n" not in rows["corrupt"]["error"]


def test_report_writes_the_csv_again_with_the_scores_given_by_hand(course):
    """The CSV of a grading run is a snapshot: the written answer graded in the formgrader since is not in it."""
    before = {r["student"]: r for r in csv.DictReader(open(course / "before-report.csv"))}
    after = {r["student"]: r for r in csv.DictReader(open(course / f"grades-{ASSIGNMENT}.csv"))}
    assert float(before["good"]["score"]) == 2 and float(before["good"]["awaiting_manual"]) == 2
    assert float(after["good"]["score"]) == 3.5 and float(after["good"]["awaiting_manual"]) == 0
    cells = {(r["student"], r["cell"]): r for r in csv.DictReader(open(course / f"grades-{ASSIGNMENT}-cells.csv"))}
    assert float(cells["good", "why_add"]["score"]) == 1.5
    assert sorted(after) == sorted(before), "report must keep every student, those nbgrader's export leaves out too"


@pytest.mark.parametrize("argv, says", [
    (["grade", ASSIGNMENT, "--student", "zoe"], "no submission of ps1 from zoe"),
    (["feedback", "nosuch"], "no assignment 'nosuch'"),
    (["report", "nosuch"], "no assignment 'nosuch'"),
    (["feedback", ASSIGNMENT, "--student", "zoe"], "nothing of zoe is graded"),
])
def test_bad_input_is_refused_in_one_line_and_changes_nothing(course, refused, argv, says):
    files = sorted(p.relative_to(course) for p in course.rglob("*"))
    csv_text = (course / f"grades-{ASSIGNMENT}.csv").read_text()
    assert says in refused(main, [*argv, "--course", str(course)])
    assert sorted(p.relative_to(course) for p in course.rglob("*")) == files
    assert (course / f"grades-{ASSIGNMENT}.csv").read_text() == csv_text


@pytest.mark.parametrize("command", ["grade", "feedback", "report"])
@pytest.mark.parametrize("with_gradebook", [False, True])
def test_a_folder_without_the_course_configuration_is_refused(course, tmp_path, refused, command, with_gradebook):
    """Without nbgrader_config.py the gradebook, the folders and the limits would be nbgrader's defaults."""
    for folder in ("source", "release", "submitted"):
        shutil.copytree(course / folder, tmp_path / folder)
    if with_gradebook:
        shutil.copy(course / DATABASE, tmp_path / "gradebook.db")
    files = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    line = refused(main, [command, ASSIGNMENT, "--course", str(tmp_path)])
    assert "no nbgrader_config.py" in line
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == files, "it left files behind"


def test_the_cells_csv_has_a_row_per_graded_cell_and_counts_written_answers_apart(course):
    cells = {(r["student"], r["cell"]): r for r in csv.DictReader(open(course / f"grades-{ASSIGNMENT}-cells.csv"))}
    assert {cell for student, cell in cells if student == "good"} == {"test_add", "test_mul", "why_add"}
    assert {student for student, _ in cells} == {*HOSTILE_ADD, "colab"}
    assert cells["ints_only", "test_add"]["kind"] == "test" and float(cells["ints_only", "test_add"]["score"]) == 0
    written = cells["colab", "why_add"]     # answered, not graded yet: no score, its points awaiting
    assert written["kind"] == "written" and written["score"] == "" and float(written["awaiting_manual"]) == 2
    untouched = cells["looper", "why_add"]  # left as released: nbgrader gives it 0 ("No response.")
    assert float(untouched["score"]) == 0 and float(untouched["awaiting_manual"]) == 0
    totals = {r["student"]: r for r in csv.DictReader(open(course / f"grades-{ASSIGNMENT}.csv"))}
    assert float(totals["colab"]["score"]) == 2 and float(totals["colab"]["max_score"]) == 4
    assert float(totals["colab"]["awaiting_manual"]) == 2 and float(totals["looper"]["awaiting_manual"]) == 0


def page_of(course, student):
    return (course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()


def test_feedback_shows_written_answers_awaiting_grading_then_the_graders_score_and_comment(course):
    colab = page_of(course, "colab")
    assert "awaiting manual grading" in colab and "– / 2" in colab and "0 / 2" not in colab
    assert "2 / 4</b>, with 2 points of written answers still to be graded by hand" in colab
    good = page_of(course, "good")
    assert "1.5 / 2" in good and html.escape(MANUAL["good"][1]) in good and "3.5 / 4" in good
    assert "awaiting" not in good and "graded by hand" not in good
    looper = page_of(course, "looper")
    assert "No response." in looper and "awaiting" not in looper


def test_feedback_shows_messages_but_never_test_code(course):
    pages = {p.parts[-3]: p.read_text() for p in (course / "feedback").glob(f"*/{ASSIGNMENT}/{ASSIGNMENT}.html")}
    assert sorted(pages) == sorted([*HOSTILE_ADD, "colab", *UNGRADABLE]), f"feedback pages for {sorted(pages)}"
    for student in UNGRADABLE:   # a page that says why, and no score: not a zero
        assert "This notebook could not be graded" in pages[student] and "Score: <b>none</b>" in pages[student]
    for student, page in pages.items():
        assert "torch.ones(2), torch.ones(2)" not in page, f"{student}'s feedback shows the hidden test's code"
        assert "BEGIN HIDDEN TESTS" not in page, f"{student}'s feedback shows the hidden test's code"
    assert "add is wrong for tensors" in pages["ints_only"], "the failing hidden test's message is missing"
    assert "3.5 / 4" in pages["good"]


def recorded(course, students):
    """The files nbgrader's steps wrote for `students` (sanitized and autograded notebooks), their automatic
    scores and comments (nbgrader's autograde asks again for the scores given by hand: not compared)."""
    from nbgrader.api import Gradebook
    files = {path.relative_to(course): path.read_bytes() for student in students
             for folder in (course / ".autograder" / ASSIGNMENT / "sanitized", course / "autograded")
             for path in (folder / student).rglob("*") if path.is_file()}
    with Gradebook(f"sqlite:///{course / DATABASE}") as gradebook:
        def scores(student):
            submission = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
            return ({g.name: g.auto_score for g in submission.grades},
                    {c.name: c.auto_comment for c in submission.comments})
        return files, {student: scores(student) for student in students}


def test_nbgrader_as_it_is_records_what_the_grader_recorded(course, tmp_path):
    """The grader runs each of nbgrader's steps in one pass over the notebook, inside faster_nbgrader. nbgrader as
    it is (NbGraderAPI.autograde: two passes, an engine per gradebook, the metadata schema checked for every cell),
    run again on a copy of the course from the same staged submissions, writes the same notebooks, byte for byte,
    and the same scores and comments."""
    from autograder.grade import nbgrader_steps, stages

    copied = tmp_path / "course"
    shutil.copytree(course, copied)
    config = copied / "nbgrader_config.py"
    config.write_text(config.read_text().replace(str(course), str(copied)))
    stage = stages(copied / ".autograder" / ASSIGNMENT)
    students = sorted(folder.name for folder in stage["sanitized"].iterdir())
    assert len(students) == len(HOSTILE_ADD) + 1, f"staged submissions: {students}"
    sanitize, record = nbgrader_steps(copied, stage, single_pass=False)
    for student in students:
        assert not sanitize(ASSIGNMENT, student) and not record(ASSIGNMENT, student), student
    grader_files, grader_scores = recorded(course, students)
    nbgrader_files, nbgrader_scores = recorded(copied, students)
    assert sorted(nbgrader_files) == sorted(grader_files), "the two wrote different files"
    differ = [str(path) for path, data in grader_files.items() if nbgrader_files[path] != data]
    assert not differ, f"nbgrader as it is wrote other notebooks than the grader: {differ}"
    assert nbgrader_scores == grader_scores


def test_the_course_assignments_grade_like_nbgrader(tmp_path):
    """Notebook 01 through the grader: the solutions get every point, the untouched release none, and so
    does the release whose answers import the course's finished versions; the kernels are forked from the
    workers' kernel servers."""
    assignment = "01_positional_encoding"
    course = ScratchCourse(tmp_path, assignment)
    release = course.release
    finished = with_answers(release, {name: f"from transformer_course import {name}" for name in answer_ids(release)})
    for student, notebook in (("solved", solved(release, course.solution)), ("untouched", release),
                              ("finished", finished)):
        course.submit(student, notebook)
    graded = subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, "--workers", "2"],
                            cwd=tmp_path, check=True, capture_output=True, text=True, timeout=600)
    assert "the kernel server failed" not in graded.stderr, f"the workers' kernels were not forked: {graded.stderr}"
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        def tests(student):
            submission = gradebook.find_submission_notebook(assignment, assignment, student)
            return {g.name: (g.auto_score, g.max_score) for g in submission.grades if g.cell_type == "code"}
        full, untouched, finished = tests("solved"), tests("untouched"), tests("finished")
    assert full and all(score == top for score, top in full.values()), f"the solutions lost points: {full}"
    assert all(score == 0 for score, _ in untouched.values()), f"the untouched release scored: {untouched}"
    assert all(score == 0 for score, _ in finished.values()), f"the course's finished answers scored: {finished}"


def test_the_fork_server_imports_what_the_judges_of_each_assignment_import_on_first_use():
    """An optimizer's first step imports torch._dynamo, the BLEU oracle sacreBLEU: the assignments whose oracles do
    are listed, with those modules."""
    import re

    from autograder.execution.local_workers import preloaded
    from autograder.registry import registry

    oracles = ROOT / "course_testkit" / "oracles"
    signs = {"torch._dynamo": r"optim\.\w+\(", "sacrebleu": r"\bsacrebleu\b"}
    needed = {}
    for notebook in SOLUTIONS.glob("*/*.ipynb"):
        used = set(re.findall(r"course_testkit\.oracles(?:\.| import )(\w+)", notebook.read_text()))
        sources = [(oracles / f"{module}.py").read_text() for module in used]
        modules = sorted(m for m, sign in signs.items() if any(re.search(sign, source) for source in sources))
        if modules:
            needed[notebook.stem] = modules
    assert needed == {a: sorted(m) for a, m in registry().judges_first_use_imports.items()}
    assert "torch._dynamo" in preloaded("07_training") and "torch._dynamo" not in preloaded("03_masking")
    # an instructor's own assignment: no judges of the course's, so its workers start without torch and the oracles
    assert "torch" in preloaded("03_masking") and preloaded("ps1") == ["autograder.execution.dispatch"]


def test_the_grade_command_starts_its_workers_fork_server_before_its_own_imports(tmp_path):
    """The fork server's imports (3-5 s) overlap the command's own (nbgrader's, 1-2 s) on another core: the command
    starts it before it imports the grader, for local workers only (a Dask cluster's workers have their own)."""
    script = ("import sys\nimport autograder.execution.local_workers as workers\nstarted = []\n"
              "workers.fork_server = lambda assignment=None: started.append((assignment, 'autograder.grade' in sys.modules))\n"
              "from autograder.__main__ import main\n"
              "status = main(sys.argv[1:])\nprint(started, status)")
    course = ["--course", str(tmp_path / "no course")]
    for options, expected in (([], "[('ps1', False)] 2"), (["--scheduler", "tcp://127.0.0.1:1"], "[] 2")):
        done = subprocess.run([sys.executable, "-c", script, "grade", "ps1", *course, *options], capture_output=True,
                              text=True, timeout=120)
        assert done.stdout.strip() == expected, f"{options}: {done.stdout} {done.stderr}"


def test_local_workers_start_with_the_judges_modules_imported_below_the_commands_priority():
    """The fork server imports torch, nbgrader and the course's oracles once; each worker is forked with them, so
    a grading run does not pay seconds of imports per worker. Workers (and the kernels they start) run at a
    lower priority than the grading command, which records their results. In a fresh process, as a grading command
    is: a process keeps the first fork server it starts, with that one's imports."""
    from autograder.execution.dispatch import WORKER_NICENESS

    # The modules a worker's first torch._check imports (none, when the fork server imported them).
    first_check = ("(lambda sys, torch: (lambda before: (torch._check(True, lambda: ''), "
                   "sorted(set(sys.modules) - before))[1])(set(sys.modules)))(__import__('sys'), __import__('torch'))")
    script = ("import os, sys\nfrom autograder.execution.dispatch import LocalPool\n"
              "from autograder.execution.local_workers import WORKER_IMPORTS\n"
              "pool = LocalPool(1, '03_masking')\nrun = lambda f, *a: pool.executor.submit(f, *a).result(timeout=120)\n"
              "print(run(os.nice, 0) - os.nice(0))\n"
              "print(run(eval, f'[m for m in {WORKER_IMPORTS!r} if m not in __import__(\"sys\").modules]'))\n"
              f"print(run(eval, {first_check!r}))\npool.close()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    niceness, not_loaded, imported = done.stdout.strip().splitlines()[-3:]
    assert int(niceness) == min(WORKER_NICENESS, 19 - os.nice(0)), f"a worker runs {niceness} below the command"
    assert not_loaded == "[]", f"these modules were not imported before the worker's first job: {not_loaded}"
    assert imported == "[]", f"a worker's first torch._check imported modules: {imported[:300]}"


def test_a_submission_nbgrader_refuses_is_reported_with_the_error_nbgrader_names(tmp_path):
    """The one line on the console and in the CSV names nbgrader's error, not the last line of its log."""
    from autograder.grade import _Batch

    assignment = "01_positional_encoding"
    course = ScratchCourse(tmp_path, assignment)
    outdated = with_answers(course.release, course.solution_answers())
    for cell in outdated.cells:
        if "nbgrader" in cell.metadata:
            cell.metadata.nbgrader["schema_version"] = 0
    lines = []
    batch = _Batch(tmp_path, assignment, tmp_path / "release" / assignment, ["old"], lines.append)
    # Straight into the step nbgrader runs (the repair step before it would reset the metadata).
    repaired = tmp_path / ".autograder" / assignment / "repaired" / "old" / assignment
    repaired.mkdir(parents=True)
    nbformat.write(outdated, repaired / f"{assignment}.ipynb")
    error = batch.sanitize(assignment, "old")
    assert error, "nbgrader sanitized a notebook of schema version 0"
    batch._nbgrader_failed("old", "nbgrader could not read the submission", error)
    expected = "nbgrader could not read the submission: nbgrader.nbgraderformat.common.SchemaTooOldError: Outdated schema"
    assert lines and lines[0].strip().startswith(f"old: {expected}"), lines
    assert batch.reports["old"][assignment].error.startswith(expected), batch.reports["old"][assignment].error
