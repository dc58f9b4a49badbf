"""What the feedback pages may show of a failing test's message (autograder/feedback.py): every message the
hidden tests raise, even where its words are code, and no line that quotes the hidden tests' code.

The real case is notebook 07's scheduler test: its hidden test names the mistake with "call scheduler.step()
after optimizer.step()", and `optimizer.step()` is also a line of the hidden test's code. The end-to-end
pages (grading included) are checked in test_grader.py.
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


def test_the_hidden_tests_own_message_is_shown_where_its_words_are_hidden_code():
    source, release = notebooks()
    answer = wrong_order_answer(source)
    message = scheduler_test_message(source, answer, hidden_only=True)
    assert HIDDEN_HINT in message
    submission = copy_with_answer(release, "train_step", answer)
    hidden = hidden_text(source)
    assert "optimizer.step()" in hidden.code, "the hint quotes a hidden code line: the case this test is about"
    assert scrub(message, hidden.secret(public_text(release, submission))) == message
    assert scrub(message, hidden) == message, "a message the hidden test raises is shown even if its code is secret"


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
    line = "ref_scheduler = torch.optim.lr_scheduler.LambdaLR(ref_optimizer, schedule)"
    assert line in section and not any(line in kept for kept in leaked)
    assert not any("params(early)" in kept for kept in leaked), "the line holding the hint is code too: cut"
    assert not any("_hidden_test_train_step_scheduler" in kept for kept in leaked)
    assert leaked.count(HIDDEN_NOTE) > 40
    assert scrub(f"ValueError: {line}", hidden) == HIDDEN_NOTE


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
