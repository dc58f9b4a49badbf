"""Submissions that hide an error from the kernel's display gain nothing: the kernel's reply still says the cell failed.

Each trick below is public knowledge for nbgrader: it rides along with a wrong answer, whose test must still fail,
while the correct answer after it keeps its point. Nothing in the kernel watches or puts back what a trick changes
(autograder/execution/execute.py): the executor reads the kernel's own verdict (the reply's status) besides the
outputs, and a test cell whose reply says it failed gets an error even if none was shown. All the tricks run in one
notebook, one after the other, as one submission could hold them.

A trick the reply does not show (an exception swallowed, a builtin or a helper replaced) passes a plain test cell,
as it does in plain nbgrader: such a cell's verdict is the kernel's word, and the grader says which cells are plain
(grade.py). Written as probe and judge, the same test is judged outside the kernel and fails.
"""
import pytest
from nbformat.v4 import new_notebook
from support.notebooks import nbgrader_cell

from autograder.execution.execute import execute_notebook
from autograder.execution.sandbox import Limits, sandbox_available

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or does not "
                                 "work on this machine (user namespaces disabled?): the sandbox cannot be tested"),
              pytest.mark.xdist_group("error_hiding"), pytest.mark.slow]

LIMITS = Limits(cell_timeout=20, total_timeout=120, memory_mb=3072, processes=64, output_bytes=20_000)

SETUP = """import torch
from course_testkit.probing import run_test
"""
WRONG_ADD = "def add(a, b):\n    return a - b\n"
CORRECT_MUL = "def mul(a, b):\n    return a * b\n"
TEST_ADD = 'assert add(1, 2) == 3, "add(1, 2) should be 3"\nprint("add tested")\n'
TEST_MUL = "assert mul(2, 3) == 6, \"mul(2, 3) should be 6\"\nprint('mul tested')\n"

# trick -> the code that rides along with the wrong answer: each hides the failing test's error from the display
TRICKS = {
    "a custom exception handler": """
get_ipython().set_custom_exc((BaseException,), lambda shell, etype, value, tb, tb_offset=None: [])
""",
    "the shell's traceback display replaced": """
get_ipython().showtraceback = lambda *args, **kwargs: None
""",
    "the shell's inner traceback display replaced": """
get_ipython()._showtraceback = lambda *args, **kwargs: None
""",
    "an event callback clears the cell's output": """
from IPython.display import clear_output
get_ipython().events.register("post_run_cell", lambda result: clear_output())
""",
    "an event callback sets a custom exception handler before every cell": """
handler = lambda shell, etype, value, tb, tb_offset=None: []
get_ipython().events.register("pre_run_cell", lambda info: get_ipython().set_custom_exc((BaseException,), handler))
""",
    "a profile function hides tracebacks while the test runs": """
import sys

def quiet(frame, event, arg):
    get_ipython().showtraceback = lambda *args, **kwargs: None

sys.setprofile(quiet)
""",
    "the kernel's error messages are dropped": """
session = get_ipython().kernel.session
send = session.send

def no_errors(stream, msg_or_type, *args, **kwargs):
    if msg_or_type == "error":
        return None
    return send(stream, msg_or_type, *args, **kwargs)

session.send = no_errors
""",
}

# A builtin the test uses, replaced: the kernel's reply says the plain cell passed; the judge, outside, is not fooled.
SHADOWED_ABS = "abs = lambda value: 0\n"
PLAIN_TEST = 'assert abs(add(2, 2) - 4) < 1e-9, "add(2, 2) should be 4"\n'
JUDGED_TEST = '''def probe():
    return add(2, 2)

def judge(found):
    assert abs(found - 4) < 1e-9, "add(2, 2) should be 4"

run_test(probe, judge)
'''


def one_exercise(name, answer, test):
    """An answer cell and its test cell, the functions renamed to ``name``."""
    return [nbgrader_cell(answer.replace("add", name), name, solution=True),
            nbgrader_cell(test.replace("add", name), f"test_{name}", grade=True, points=1)]


def notebook(tricks, test=TEST_ADD):
    """The set-up, then for each trick a wrong answer riding with it and its ``test``, followed by a correct answer and
    its test: every trick must fail its own test and leave the next, correct one alone."""
    cells = [nbgrader_cell(SETUP, "setup")]
    for i, trick in enumerate(tricks):
        cells += one_exercise(f"add{i}", WRONG_ADD + trick, test)
        cells += one_exercise(f"mul{i}", CORRECT_MUL.replace("mul", "add"), TEST_MUL.replace("mul", "add"))
    return new_notebook(cells=cells)


def errors(cell):
    return [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]


def graded(tricks, folder, test=TEST_ADD):
    """(each trick's answer cell, its test cell, the next correct answer's test cell) of ``notebook``, executed."""
    executed, _ = execute_notebook(notebook(tricks, test), folder, LIMITS)
    cells = executed.cells[1:]
    return [(cells[4 * i], cells[4 * i + 1], cells[4 * i + 3]) for i in range(len(tricks))]


@pytest.fixture(scope="module")
def graded_tricks(tmp_path_factory):
    """trick -> (its answer cell, its test cell, the next correct answer's test cell), all in one kernel."""
    return dict(zip(TRICKS, graded(list(TRICKS.values()), tmp_path_factory.mktemp("tricks"))))


def test_the_wrong_answer_fails_without_tricks(tmp_path):
    [(_, failing, passing)] = graded([""], tmp_path)
    assert "add0(1, 2) should be 3" in " ".join(errors(failing)) and errors(passing) == []
    assert "tested" in "".join(o.get("text", "") for o in passing.outputs)


@pytest.mark.parametrize("trick", TRICKS)
def test_a_trick_gains_nothing(trick, graded_tricks):
    answer, test, next_test = graded_tricks[trick]
    assert errors(answer) == [], f"the trick itself failed: {errors(answer)}"
    assert errors(test), f"{trick}: the wrong answer passed its test"
    # (its printed "tested" may be cleared by a trick: no error, and a count, say it ran)
    assert errors(next_test) == [] and next_test.execution_count, \
        f"{trick}: the next, correct answer lost its point: {errors(next_test)}"


def test_a_plain_cells_verdict_is_the_kernels_word_a_judged_cells_is_not(tmp_path_factory):
    [(_, plain, _)] = graded([SHADOWED_ABS], tmp_path_factory.mktemp("plain"), PLAIN_TEST)
    assert errors(plain) == [], "a plain test cell is the kernel's word, as in plain nbgrader"
    [(_, judged, next_test)] = graded([SHADOWED_ABS], tmp_path_factory.mktemp("judged"), JUDGED_TEST)
    assert errors(judged) == ["AssertionError: add0(2, 2) should be 4"] and errors(next_test) == []
