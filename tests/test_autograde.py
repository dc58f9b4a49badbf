"""The autograder round trip, through plain ``nbgrader autograde`` on a scratch course.

For every assignment with a suite of realistic answers in tests/submissions/: the release filled with the
solutions, graded by nbgrader itself, gets full marks and raises in no cell (the notebooks' smoke mode, which the
autograder uses; tests/test_notebooks_run.py runs the quick modes). The other submissions are scored with
nbgrader's rule in one kernel per assignment (``support.replay.KernelReplay``), which first scores the solution exactly as
nbgrader did: the untouched release gets zero on every test cell, and so does the release whose every answer
imports the course's finished version; each wrong answer loses points in its own exercise only (with feedback
that names the mistake), each route to the course's finished answer scores 0 in its exercise, and each correct
but unusual answer keeps full marks. The suites hold about 400 answers: a fresh kernel and fresh imports for each
would take most of CI's time.
"""
import nbformat
import pytest
from support.courses import ScratchCourse
from support.notebooks import (
    SOLUTIONS,
    SUBMISSIONS,
    answer_ids,
    finished_answers,
    grade_cells_of,
    load_suite,
    nbgrader_cells,
    pack,
    with_answers,
)
from support.replay import KernelReplay

from autograder.registry import registry

pytestmark = pytest.mark.slow   # runs notebooks, kernels or the grader: `-m 'not slow'` leaves it out

ASSIGNMENTS = sorted(p.stem for p in SUBMISSIONS.glob("[0-9][0-9]_*.py"))


# Three kinds of route to the course's finished answers, run through the kernel for every exercise: the object
# itself, a wrapper (or a module) around it, a copy of its code (support.notebooks.finished_answers has every route; in the
# kernel the stripped package holds none of them: tests/test_stripped_package.py).
KERNEL_ROUTES = ("imports the finished version", "a wrapper around a reference taken earlier",
                 "a module that holds the finished one", "a verbatim copy of the package's source")


def suites(assignment):
    """kind -> answers: the suite's wrong and unusual answers, and routes to the package's finished answers."""
    wrong, unusual = load_suite(assignment)
    solution = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    finished = [a for a in finished_answers(answer_ids(solution)) if a.why in KERNEL_ROUTES]
    return {"wrong": wrong, "unusual": unusual, "finished": finished}


def cases():
    """(assignment, kind, answer) for every answer of every suite, grouped by assignment for xdist."""
    for assignment in ASSIGNMENTS:
        for kind, answers in suites(assignment).items():
            for answer in answers:
                yield pytest.param(assignment, kind, answer, id=f"{assignment}-{kind}-{answer.exercise}-{answer.why[:40]}",
                                   marks=pytest.mark.xdist_group(assignment))


_graded = {}

# The solution's submission ends with a cell of its own, as a student may add one: it prints the modules the whole
# notebook has imported by then in nbgrader's kernel (for the test of the kernel server's imports ahead).
MODULES_CELL = 'import sys\nprint("imported:", " ".join(sorted(sys.modules)))'


def with_modules_cell(notebook):
    notebook.cells.append(nbformat.v4.new_code_cell(MODULES_CELL))
    return notebook


def imported_modules(course):
    """The modules the solution's kernel had imported at the end of the notebook, as its last cell printed them."""
    executed = nbformat.read(course.path("autograded", "solution"), as_version=4)
    (printed,) = [line for output in executed.cells[-1].outputs for line in output.get("text", "").splitlines()
                  if line.startswith("imported: ")]
    return set(printed.split()[1:])


def whole_release_answers(course):
    """student -> answers for every exercise: the untouched release, and the course's finished versions imported."""
    release = nbgrader_cells(course.release)
    exercises = answer_ids(course.solution)
    return {"untouched": {exercise: release[exercise].source for exercise in exercises},
            "finished": {exercise: f"from transformer_course import {exercise}" for exercise in exercises}}


def graded_assignment(assignment, tmp_path_factory):
    """Grade every student of one assignment once: (course, scores, feedback, student -> {exercise: answer}).

    scores: student -> {grade_id: (score, max)}, "solution" by nbgrader and "replayed solution" by the replay;
    feedback: student -> {grade_id: the errors shown}.
    """
    if assignment not in _graded:
        course = ScratchCourse(tmp_path_factory.mktemp(assignment), assignment)
        course.submit("solution", with_modules_cell(with_answers(course.release, course.solution_answers())))
        course.autograde()
        scores = course.scores()
        feedback = {}
        placement = {}
        with KernelReplay(course.solution, tmp_path_factory.mktemp(f"{assignment}-replay"), assignment) as replay:
            scores["replayed solution"] = replay.reference
            for student, answers in whole_release_answers(course).items():
                scores[student], feedback[student] = replay.grade(answers)
            for kind, answers in suites(assignment).items():
                for number, chosen in enumerate(pack(answers)):
                    student = f"{kind}{number}"
                    placement[student] = chosen
                    scores[student], feedback[student] = replay.grade(
                        {exercise: a.source for exercise, a in chosen.items()})
        _graded[assignment] = course, scores, feedback, placement
    return _graded[assignment]


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.xdist_group(a)) for a in ASSIGNMENTS])
def test_solutions_get_full_marks(assignment, tmp_path_factory):
    course, scores, _, _ = graded_assignment(assignment, tmp_path_factory)
    lost = {cell: score for cell, score in scores["solution"].items() if score[0] != score[1]}
    assert not lost, f"the release filled with the solutions lost points: {lost}"
    assert len(scores["solution"]) >= len(answer_ids(course.solution)), "fewer test cells than exercises"


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.xdist_group(a)) for a in ASSIGNMENTS])
def test_the_solution_raises_in_no_cell(assignment, tmp_path_factory):
    course, _, _, _ = graded_assignment(assignment, tmp_path_factory)
    executed = nbformat.read(course.path("autograded", "solution"), as_version=4)
    errors = [(cell.get("id"), output.ename, output.evalue) for cell in executed.cells if cell.cell_type == "code"
              for output in cell.outputs if output.output_type == "error"]
    assert not errors, f"{assignment} in smoke mode raised errors: {errors}"


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.xdist_group(a)) for a in ASSIGNMENTS])
def test_the_replay_scores_the_solution_as_nbgrader_did(assignment, tmp_path_factory):
    _, scores, _, _ = graded_assignment(assignment, tmp_path_factory)
    assert scores["replayed solution"] == scores["solution"], \
        f"the replay and nbgrader disagree on the solution: {scores['replayed solution']} against {scores['solution']}"


# Slow to import, and imported by some notebooks only: the grader's kernel server imports them ahead of the kernels of
# those notebooks (the exercise registry's KERNEL_FIRST_USE_IMPORTS, course_testkit/exercises.py).
SLOW_IMPORTS = ("torch._dynamo", "spacy")


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.xdist_group(a)) for a in ASSIGNMENTS])
def test_the_kernel_server_imports_ahead_what_the_notebook_imports_slowly(assignment, tmp_path_factory):
    course, _, _, _ = graded_assignment(assignment, tmp_path_factory)
    imported = {m for m in SLOW_IMPORTS if m in imported_modules(course)}
    ahead = set(registry().kernel_first_use_imports.get(assignment, ()))
    assert ahead == imported, (f"{assignment}'s kernels import {sorted(imported)} of {SLOW_IMPORTS} on first use, "
                               f"the kernel server imports {sorted(ahead)} ahead: update KERNEL_FIRST_USE_IMPORTS")


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.xdist_group(a)) for a in ASSIGNMENTS])
def test_untouched_release_gets_zero_on_every_test_cell(assignment, tmp_path_factory):
    _, scores, _, _ = graded_assignment(assignment, tmp_path_factory)
    scored = {cell: score for cell, score in scores["untouched"].items() if score[0] != 0}
    assert not scored, f"the untouched release scored points: {scored}"


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.xdist_group(a)) for a in ASSIGNMENTS])
def test_the_course_finished_answers_get_zero_on_every_test_cell(assignment, tmp_path_factory):
    _, scores, _, _ = graded_assignment(assignment, tmp_path_factory)
    scored = {cell: score for cell, score in scores["finished"].items() if score[0] != 0}
    assert not scored, f"importing the course's finished answers scored points: {scored}"


@pytest.mark.parametrize("assignment, kind, answer", list(cases()))
def test_realistic_answers_are_graded_right(assignment, kind, answer, tmp_path_factory):
    course, scores, feedback, placement = graded_assignment(assignment, tmp_path_factory)
    student = next(s for s, chosen in placement.items() if chosen.get(answer.exercise) == answer)
    own_cells = grade_cells_of(course.solution, answer.exercise)
    assert own_cells, f"no test cells for exercise {answer.exercise}"
    if kind == "unusual":
        lost = {cell: s for cell, s in scores[student].items() if s[0] != s[1]}
        assert not lost, f"a correct answer ({answer.why}) lost points: {lost}"
        return
    own, maximum = (sum(scores[student][cell][i] for cell in own_cells) for i in (0, 1))
    assert own < maximum, f"the wrong answer ({answer.why}) kept full marks in {answer.exercise}"
    if kind == "finished":
        kept = {cell: scores[student][cell] for cell in own_cells if scores[student][cell][0]}
        assert not kept, f"the course's finished {answer.exercise} ({answer.why}) earned points: {kept}"
    # The mistake costs nothing elsewhere: every exercise this student answered right keeps full marks.
    for exercise in set(answer_ids(course.solution)) - set(placement[student]):
        for cell in grade_cells_of(course.solution, exercise):
            score, most = scores[student][cell]
            assert score == most, f"the wrong {answer.exercise} ({answer.why}) cost points in {cell}"
    shown = "\n".join(feedback[student].get(cell, "") for cell in own_cells)
    assert answer.message.lower() in shown.lower(), \
        f"the feedback for '{answer.why}' should say '{answer.message}', it says:\n{shown}"
    assert not answer.misleading or answer.misleading.lower() not in shown.lower(), \
        f"the feedback for '{answer.why}' should not say '{answer.misleading}' (another mistake's hint):\n{shown}"


def test_kernel_replay_scores_like_nbgrader_and_forgets_the_previous_student(tmp_path):
    from nbformat.v4 import new_code_cell, new_notebook

    def cell(source, grade_id, **nbgrader):
        return new_code_cell(source, metadata={"nbgrader": {"grade_id": grade_id, **nbgrader}})

    solution = new_notebook(cells=[
        cell("import math\nCALLS = []", "setup"),
        cell("def area(r):\n    return math.pi * r * r", "area", solution=True, grade=False),
        cell("CALLS.append('area')\nassert abs(area(1) - math.pi) < 1e-9, 'area(1) should be pi'",
             "test_area", grade=True, points=2),
        cell("def double(x):\n    return 2 * x", "double", solution=True, grade=False),
        cell("assert double(3) == 6, 'double(3) should be 6'", "test_double", grade=True, points=1),
    ])
    with KernelReplay(solution, tmp_path) as replay:
        scores, errors = replay.grade({"area": "def helper(r):\n    return r * r\ndef area(r):\n    return helper(r)"})
        assert scores == {"test_area": (0.0, 2.0), "test_double": (1.0, 1.0)}
        assert "area(1) should be pi" in errors["test_area"] and not errors["test_double"]
        # The previous student's wrong area is replaced by the solution's, and its helper is gone.
        scores, _ = replay.grade({"double": "def double(x):\n    return 2 * x + round(area(0))"})
        assert scores == {"test_area": (2.0, 2.0), "test_double": (1.0, 1.0)}
        scores, errors = replay.grade({"double": "def double(x):\n    return helper(x) + x"})
        assert scores == {"test_area": (2.0, 2.0), "test_double": (0.0, 1.0)}
        assert "NameError" in errors["test_double"]
        scores, _ = replay.grade({"double": "def double(x):\n    return x + x"})
        assert scores == {"test_area": (2.0, 2.0), "test_double": (1.0, 1.0)}
