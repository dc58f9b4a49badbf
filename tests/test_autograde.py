"""The autograder round trip, through plain ``nbgrader autograde`` on a scratch course.

For every assignment with a suite of realistic answers in tests/submissions/: the release filled with
the solutions gets full marks, the untouched release gets zero on every test cell, each wrong answer
loses points in its own exercise only (with feedback that names the mistake), and each correct but
unusual answer keeps full marks.
"""
import pytest

from grading import SUBMISSIONS, ScratchCourse, answer_ids, grade_cells_of, load_suite, pack, with_answers

ASSIGNMENTS = sorted(p.stem for p in SUBMISSIONS.glob("[0-9][0-9]_*.py"))


def cases():
    """(assignment, kind, answer) for every answer of every suite, grouped by assignment for xdist."""
    for assignment in ASSIGNMENTS:
        wrong, unusual = load_suite(assignment)
        for kind, answers in (("wrong", wrong), ("unusual", unusual)):
            for answer in answers:
                yield pytest.param(assignment, kind, answer, id=f"{assignment}-{kind}-{answer.exercise}-{answer.why[:40]}",
                                   marks=pytest.mark.xdist_group(assignment))


_graded = {}


def graded(assignment, tmp_path_factory):
    """Grade every student of one assignment once: (course, scores, student -> {exercise: answer})."""
    if assignment not in _graded:
        course = ScratchCourse(tmp_path_factory.mktemp(assignment), assignment)
        wrong, unusual = load_suite(assignment)
        solutions = course.solution_answers()
        course.submit("solution", with_answers(course.release, solutions))
        course.submit("untouched", course.release)
        placement = {}
        for kind, answers in (("wrong", wrong), ("unusual", unusual)):
            for number, chosen in enumerate(pack(answers)):
                placement[f"{kind}{number}"] = chosen
                answers_by_cell = {**solutions, **{exercise: a.source for exercise, a in chosen.items()}}
                course.submit(f"{kind}{number}", with_answers(course.release, answers_by_cell))
        course.autograde()
        _graded[assignment] = course, course.scores(), placement
    return _graded[assignment]


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.xdist_group(a)) for a in ASSIGNMENTS])
def test_solutions_get_full_marks(assignment, tmp_path_factory):
    course, scores, _ = graded(assignment, tmp_path_factory)
    lost = {cell: score for cell, score in scores["solution"].items() if score[0] != score[1]}
    assert not lost, f"the release filled with the solutions lost points: {lost}"
    assert len(scores["solution"]) >= len(answer_ids(course.solution)), "fewer test cells than exercises"


@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.xdist_group(a)) for a in ASSIGNMENTS])
def test_untouched_release_gets_zero_on_every_test_cell(assignment, tmp_path_factory):
    _, scores, _ = graded(assignment, tmp_path_factory)
    scored = {cell: score for cell, score in scores["untouched"].items() if score[0] != 0}
    assert not scored, f"the untouched release scored points: {scored}"


@pytest.mark.parametrize("assignment, kind, answer", list(cases()))
def test_realistic_answers_are_graded_right(assignment, kind, answer, tmp_path_factory):
    course, scores, placement = graded(assignment, tmp_path_factory)
    student = next(s for s, chosen in placement.items() if chosen.get(answer.exercise) == answer)
    own_cells = grade_cells_of(course.solution, answer.exercise)
    assert own_cells, f"no test cells for exercise {answer.exercise}"
    if kind == "unusual":
        lost = {cell: s for cell, s in scores[student].items() if s[0] != s[1]}
        assert not lost, f"a correct answer ({answer.why}) lost points: {lost}"
        return
    own, maximum = (sum(scores[student][cell][i] for cell in own_cells) for i in (0, 1))
    assert own < maximum, f"the wrong answer ({answer.why}) kept full marks in {answer.exercise}"
    # The mistake costs nothing elsewhere: every exercise this student answered right keeps full marks.
    for exercise in set(answer_ids(course.solution)) - set(placement[student]):
        for cell in grade_cells_of(course.solution, exercise):
            score, most = scores[student][cell]
            assert score == most, f"the wrong {answer.exercise} ({answer.why}) cost points in {cell}"
    feedback = "\n".join(course.feedback_text(student, cell) for cell in own_cells)
    assert answer.message.lower() in feedback.lower(), \
        f"the feedback for '{answer.why}' should say '{answer.message}', it says:\n{feedback}"
