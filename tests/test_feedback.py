"""What the feedback pages may show of a failing test's message (autograder/feedback.py): every message the
hidden tests raise, even where its words are code, and no line that quotes the hidden tests' code.

The case came from notebook 07's scheduler test, whose hidden code named the mistake with "call scheduler.step()
after optimizer.step()" while `optimizer.step()` was also a line of that code. Its hidden cells now call the
oracles in transformer_course.oracles, so the case is kept in a cell written here; the real cell's hint and its
visible test's hint are checked too. The end-to-end pages (grading included) are checked in test_grader.py.
"""
import warnings

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from grading import ROOT, SOLUTIONS, nbgrader_cells
from autograder.feedback import HIDDEN_NOTE, hidden_text, own_text, scrub

ASSIGNMENT = "07_training"
VISIBLE_HINT = "the scheduler moved on before the update: call scheduler.step() after optimizer.step()"
HIDDEN_HINT = "the update used the learning rate of the next step: call scheduler.step() after optimizer.step()"
# the mistake the hint is for: the scheduler steps before the optimizer
WRONG_ORDER = ("    optimizer.step()\n    if scheduler is not None:\n        scheduler.step()\n",
               "    if scheduler is not None:\n        scheduler.step()\n    optimizer.step()\n")


def notebooks():
    source = nbformat.read(SOLUTIONS / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    release = nbformat.read(ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    return source, release


def public_text(release, submission):
    return "\n".join(c.source for c in release.cells) + "\n" + own_text(submission)


def scheduler_test_message(source, answer, hidden_only=False):
    """The message notebook 07's scheduler test cell raises for `answer`: the whole cell (its visible tests catch
    the wrong order first), or only its hidden tests."""
    cells = nbgrader_cells(source)
    test = cells["test_train_step_scheduler"].source
    if hidden_only:
        test = test.split("### BEGIN HIDDEN TESTS\n")[1].split("### END HIDDEN TESTS")[0]
    namespace = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # PyTorch warns about the wrong order too
        exec(cells["setup"].source, namespace)
        exec(answer, namespace)
        try:
            exec(test, namespace)
        except AssertionError as error:
            return f"AssertionError: {error}"
    raise AssertionError("the scheduler test passed a train_step that steps the scheduler first")


def wrong_order_answer(source):
    right = nbgrader_cells(source)["train_step"].source
    answer = right.replace(*WRONG_ORDER)
    assert answer != right
    return answer


def test_the_visible_tests_hint_reaches_the_page():
    source, release = notebooks()
    answer = wrong_order_answer(source)
    message = scheduler_test_message(source, answer)
    assert VISIBLE_HINT in message
    submission = copy_with_answer(release, "train_step", answer)
    assert scrub(message, hidden_text(source).secret(public_text(release, submission))) == message


SCHEDULER_CELL = '''train_step(model, src, tgt, optimizer, scheduler)
### BEGIN HIDDEN TESTS
def _hidden_test_train_step_scheduler():
    optimizer.step()
    scheduler.step()
    assert same, "the update used the learning rate of the next step: call scheduler.step() after optimizer.step()"
_hidden_test_train_step_scheduler()
### END HIDDEN TESTS'''


def test_the_hidden_tests_own_message_is_shown_where_its_words_are_hidden_code():
    """The hidden cells now call their notebook's oracles; a cell that keeps its code inline (as the scheduler test
    once did) may raise a message whose words are lines of that code, and the message is shown whole."""
    hidden = hidden_text(new_notebook(cells=[new_code_cell(SCHEDULER_CELL)]))
    assert "optimizer.step()" in hidden.code, "the hint quotes a hidden code line: the case this test is about"
    message = f"AssertionError: {HIDDEN_HINT}"
    assert scrub(message, hidden.secret("train_step(model, src, tgt, optimizer, scheduler)")) == message
    assert scrub(message, hidden) == message, "a message the hidden test raises is shown even if its code is secret"
    assert scrub("AssertionError: optimizer.step()", hidden) == HIDDEN_NOTE, "the bare code line is still cut"


def test_notebook_07s_hidden_scheduler_test_raises_its_hint_through_the_oracle():
    source, _ = notebooks()
    message = scheduler_test_message(source, wrong_order_answer(source), hidden_only=True)
    assert HIDDEN_HINT in message


def copy_with_answer(release, grade_id, answer):
    notebook = nbformat.from_dict(release)
    nbgrader_cells(notebook)[grade_id].source = answer
    return notebook


def test_a_message_quoting_hidden_code_is_cut():
    source, release = notebooks()
    hidden = hidden_text(source).secret(public_text(release, release))
    test_cell = nbgrader_cells(source)["test_train_step_scheduler"].source
    section = test_cell.split("### BEGIN HIDDEN TESTS\n")[1].split("### END HIDDEN TESTS")[0]
    # what a submission reading its caller's code (inspect, sys._getframe) could raise
    leaked = scrub(f"AssertionError: {section}", hidden).splitlines()
    code_lines = [line for line in section.splitlines() if line.strip()]
    assert code_lines and leaked.count(HIDDEN_NOTE) == len(code_lines), leaked
    assert not any("_hidden_test_train_step_scheduler" in kept for kept in leaked)
    assert scrub(f"ValueError: {code_lines[1]}", hidden) == HIDDEN_NOTE


SYNTHETIC = '''assert mul(2, 3) == 6, "mul(2, 3) should be 6"
### BEGIN HIDDEN TESTS
def _check_dtype():
    """Multiplying a float tensor by an int keeps float32."""
    result = mul(torch.ones(2), 3)   # a tensor and an int
    assert result.dtype == torch.float32, (
        "mul changed the dtype: result = mul(torch.ones(2), 3) "
        f"gave {result.dtype}, not float32")
_check_dtype()
### END HIDDEN TESTS'''


def test_hidden_code_inside_a_hidden_message_is_shown_only_as_part_of_that_message():
    source = new_notebook(cells=[new_code_cell(SYNTHETIC)])
    hidden = hidden_text(source).secret("mul(2, 3) should be 6")
    assert "result = mul(torch.ones(2), 3)" in hidden.code
    raised = "AssertionError: mul changed the dtype: result = mul(torch.ones(2), 3) gave torch.int64, not float32"
    assert scrub(raised, hidden) == raised
    for leak in ["result = mul(torch.ones(2), 3)   # a tensor and an int",
                 "x result = mul(torch.ones(2), 3) gave",                  # the code glued to part of the message
                 "assert result.dtype == torch.float32, (",
                 "Multiplying a float tensor by an int keeps float32.",    # a docstring is not a message
                 "then def _check_dtype(): and more"]:
        assert scrub(f"first line\n{leak}", hidden) == f"first line\n{HIDDEN_NOTE}", leak
    assert scrub("AssertionError: mul(2, 3) should be 6", hidden) == "AssertionError: mul(2, 3) should be 6"
