"""What the feedback pages may show of a failing test's message (autograder/feedback.py): every message the
hidden tests raise, even where its words are code, and no line that quotes the hidden tests' code.

The case came from notebook 07's scheduler test, whose hidden code named the mistake with "call scheduler.step()
after optimizer.step()" while `optimizer.step()` was also a line of that code. Its hidden cells now call the
oracles in course_testkit.oracles, so the case is kept in a cell written here; the real cell's hint and its
visible test's hint are checked too. The end-to-end pages (grading included) are checked in test_grader.py.

An answer can also raise the tests' source encoded (read from its caller's frame): the page shows an error's type
and a capped message, with long runs without a space removed, and never a traceback.
"""
import ast
import base64
import functools
import html
import re
import warnings

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output
from support.notebooks import ROOT, SOLUTIONS, nbgrader_cells

from autograder.feedback import (
    HIDDEN_NOTE,
    LONG_RUN,
    MAX_ASSERTION,
    MAX_OTHER,
    HiddenText,
    hidden_text,
    own_text,
    render,
    scrub,
    shorten,
    shown_error,
)
from autograder.grade import CellGrade

ASSIGNMENT = "07_training"
VISIBLE_HINT = "the scheduler moved on before the update: call scheduler.step() after optimizer.step()"
HIDDEN_HINT = "the update used the learning rate of the next step: call scheduler.step() after optimizer.step()"
# the mistake the hint is for: the scheduler steps before the optimizer
WRONG_ORDER = ("    optimizer.step()\n    if scheduler is not None:\n        scheduler.step()\n",
               "    if scheduler is not None:\n        scheduler.step()\n    optimizer.step()\n")


@functools.cache     # read-only here: the tests copy what they change
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
    hidden = hidden_text(source).secret(public_text(release, submission))
    assert scrub(message, hidden) == message
    assert shown_error("AssertionError", message.removeprefix("AssertionError: "), hidden) == message


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
    public = public_text(release, release)
    hidden = hidden_text(source).secret(public)
    test_cell = nbgrader_cells(source)["test_train_step_scheduler"].source
    section = test_cell.split("### BEGIN HIDDEN TESTS\n")[1].split("### END HIDDEN TESTS")[0]
    # what a submission reading its caller's code (inspect, sys._getframe) could raise
    leaked = scrub(f"AssertionError: {section}", hidden).splitlines()
    # the hidden lines the release does not show too
    code_lines = [line for line in section.splitlines() if line.strip() and line.strip() not in public]
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


# ----------------------------------------------------------------------------- what an error may carry to the page

LEAKING_ANSWER = '''
import base64

def train_step(model, src, tgt, optimizer, scheduler=None):
    # the test cell's source, as an answer that read it from its caller's frame would have it
    secret = TEST_SOURCE * 3
    raise ValueError(base64.b64encode(secret.encode()).decode() + "\\n" + secret)
'''


def hidden_section(source):
    test_cell = nbgrader_cells(source)["test_train_step_scheduler"].source
    return test_cell.split("### BEGIN HIDDEN TESTS\n")[1].split("### END HIDDEN TESTS")[0]


def raised_by(answer, **names):
    namespace = dict(names)
    exec(answer, namespace)
    try:
        namespace["train_step"](None, None, None, None)
    except Exception as error:
        return error
    raise AssertionError("the answer raised nothing")


def page_with_error(error, source, release):
    """The feedback page of a notebook-07 submission whose scheduler test failed with `error`, as a kernel reports
    it (traceback included), and the message the page shows."""
    cell = nbformat.from_dict(nbgrader_cells(source)["test_train_step_scheduler"])
    cell.outputs = [new_output("error", ename=type(error).__name__, evalue=str(error),
                               traceback=["Traceback (most recent call last)", f"{type(error).__name__}: {error}"])]
    grade = CellGrade("test_train_step_scheduler", "test", 0.0, 1.0)
    hidden = hidden_text(source).secret(public_text(release, release))
    page = render("mallory", ASSIGNMENT, ASSIGNMENT, [(grade, cell)], hidden, None)
    return page, html.unescape(re.search(r"<pre>(.*?)</pre>", page, re.S).group(1))


def test_a_students_error_carrying_the_encoded_tests_shows_its_type_and_nothing_of_them():
    source, release = notebooks()
    section = hidden_section(source)
    error = raised_by(LEAKING_ANSWER, TEST_SOURCE=nbgrader_cells(source)["test_train_step_scheduler"].source)
    encoded = str(error).splitlines()[0]
    assert len(encoded) > 1000 and section in str(error)
    page, shown = page_with_error(error, source, release)
    assert shown == f"ValueError: [… {len(encoded)} characters removed]"
    assert "Traceback" not in page
    assert not any(encoded[i:i + 16] in page for i in range(0, len(encoded) - 16, 8))
    assert not any(line.strip() in page for line in section.splitlines() if len(line.strip()) >= 12)


def test_an_encoding_cut_into_short_words_is_capped():
    source, release = notebooks()
    encoded = base64.b64encode(hidden_section(source).encode() * 3).decode()
    words = " ".join(encoded[i:i + 60] for i in range(0, len(encoded), 60))
    _, shown = page_with_error(ValueError(words), source, release)
    assert shown == f"ValueError: {words[:MAX_OTHER].rstrip()}…"


@pytest.mark.parametrize("kind", ["prose", "base64 on one line", "base64 wrapped at 76"])
def test_a_students_5000_character_assertion_message_is_capped_and_its_encoding_removed(kind):
    source, release = notebooks()
    secret = (hidden_section(source) * 30)[:3750].encode()   # 5,000 characters in base64
    message = {"prose": ("your sums are wrong, " * 250)[:5000],
               "base64 on one line": base64.b64encode(secret).decode() + "\nmore\nlines",
               "base64 wrapped at 76": base64.encodebytes(secret).decode()}[kind]
    assert len(message) >= 5000
    _, shown = page_with_error(AssertionError(message), source, release)
    assert shown.startswith("AssertionError: ") and len(shown) <= len("AssertionError: ") + MAX_ASSERTION + 1
    if kind == "prose":
        assert shown == f"AssertionError: {message[:MAX_ASSERTION].rstrip()}…"
    else:   # newlines do not end a run: the lines wrapped at 76, and the words after the run, go with it
        assert shown == f"AssertionError: [… {len(message.rstrip())} characters removed]"


def test_an_error_name_that_is_no_class_name_is_not_shown():
    assert shown_error("Leak" + "A" * 500, "x", HiddenText()) == "Error: x"
    assert shown_error("Leak\nsecond line", "x", HiddenText()) == "Error: x"
    assert shown_error("ValueError", "", HiddenText()) == "ValueError"


def test_the_courses_own_messages_are_shown_whole():
    """The stripped package's refusals of a finished answer (NotImplementedError, not AssertionError) fit MAX_OTHER,
    and no message of the tests, the oracles or the refusals has a run without a space that the page would remove."""
    from autograder.execution.stripped import _message
    from autograder.registry import piece_path, registry

    notebooks, finished = registry().notebooks, registry().finished
    for assignment in notebooks:
        for exercise, pieces in finished.items():
            for position, (module, name) in enumerate(map(piece_path, pieces)):
                message = _message(assignment, module, name, exercise, position == 0)
                assert shown_error("NotImplementedError", message, HiddenText()) == f"NotImplementedError: {message}"
    texts = [c.source for path in SOLUTIONS.glob("*/*.ipynb")
             for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    texts += [path.read_text() for path in (ROOT / "course_testkit" / "oracles").glob("*.py")]
    texts.append((ROOT / "autograder" / "execution" / "stripped.py").read_text())
    checked = 0
    for text in texts:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue                      # a set-up cell's IPython magic
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert shorten(node.value, len(node.value)) == node.value, node.value[:2 * LONG_RUN]
                checked += 1
    assert checked > 500


def test_a_notebook_that_could_not_be_graded_shows_its_error_without_hidden_code():
    """nbgrader's error about a submission comes from the sanitized notebook, which holds the hidden tests."""
    from autograder.grade import NotebookReport

    source, release = notebooks()
    hidden = hidden_text(source).secret(public_text(release, release))
    code_line = next(line for line in hidden_section(source).splitlines()
                     if line.strip() and hidden.quoted_in(line))
    report = NotebookReport(ASSIGNMENT, error=f"nbgrader could not read the submission: ValueError: {code_line}")
    page = html.unescape(render("mallory", ASSIGNMENT, ASSIGNMENT, [], hidden, report))
    assert "This notebook could not be graded: " + HIDDEN_NOTE in page, page
    assert code_line.strip() not in page
    # no grade yet, which is not a zero
    assert "Score: <b>none</b>: this notebook could not be graded" in page and "0 / 0" not in page, page


def test_a_copy_of_an_earlier_release_is_not_called_damaged():
    """After `nbgrader generate_assignment --force`, a copy made before says so; metadata Colab dropped is damage."""
    from autograder.grade import NotebookReport
    from autograder.repair import RELEASE_CHANGED

    earlier = (f"took the nbgrader metadata of test cell 'test_noam_lr' (cell 30 of the submission) from the current "
               f"release (checksum differed): {RELEASE_CHANGED}")
    dropped = "restored the nbgrader metadata of answer cell 'noam_lr' (cell 28 of the submission), found by its position"
    pages = {repairs: html.unescape(render("ann", ASSIGNMENT, ASSIGNMENT, [], HiddenText(),
                                           NotebookReport(ASSIGNMENT, repairs=list(repairs))))
             for repairs in [(earlier,), (dropped,), (earlier, dropped)]}
    assert "released again after your copy" in pages[earlier,] and "damaged" not in pages[earlier,]
    assert "released again" not in pages[dropped,] and "damaged (Colab" in pages[dropped,]
    both = pages[earlier, dropped]
    assert both.index(earlier) < both.index("damaged (Colab") < both.index(dropped), both
