"""Submissions that change how the kernel reports errors gain nothing from the sandboxed executor.

Each trick below is public knowledge for nbgrader: it rides along with a wrong answer, whose test must
still fail, while the correct answer after it keeps its point. All the tricks run in one notebook, one
after the other, as one submission could hold them. The executor puts back what student code
can change in the kernel before every graded test cell, reads the kernel's own verdict (the reply's status)
besides the outputs, and fails a test cell during which something had to be put back.
"""
import pytest
from nbformat.v4 import new_notebook

from autograder.execute import execute_notebook
from grading import nbgrader_cell
from autograder.sandbox import Limits, sandbox_available

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or does not "
                                 "work on this machine (user namespaces disabled?): the sandbox cannot be tested"),
              pytest.mark.xdist_group("error_hiding"), pytest.mark.slow]

LIMITS = Limits(cell_timeout=20, total_timeout=120, memory_mb=3072, processes=64, output_bytes=20_000)

SETUP = """import torch
from transformer_course.testing import assert_close

def check(value, expected, what):
    assert value == expected, f"{what} gives {value}, expected {expected}"
"""
WRONG_ADD = "def add(a, b):\n    return a - b\n"
CORRECT_MUL = "def mul(a, b):\n    return a * b\n"
TEST_ADD = 'assert add(1, 2) == 3, "add(1, 2) should be 3"\nprint("add tested")\n'
# Tests that fail through a builtin, a set-up helper, the package's check and torch: the tricks aimed at those.
TEST_WITH_ABS = 'assert abs(add(2, 2) - 4) < 1e-9, "add(2, 2) should be 4"\n'
TEST_WITH_HELPER = 'check(add(0, 5), 5, "add(0, 5)")\n'
TEST_WITH_PACKAGE = 'assert_close(torch.tensor(float(add(1, 1))), torch.tensor(2.0), "add(1, 1)")\n'
TEST_WITH_TORCH = 'assert torch.allclose(torch.tensor(float(add(3, 1))), torch.tensor(4.0)), "add(3, 1) should be 4"\n'
# An oracle of the hidden tests: correct add() gives the causal mask, the wrong one a mask with no False.
TEST_WITH_ORACLE = """def _hidden():
    from transformer_course.oracles import masking
    ones = torch.ones(3, 3)
    masking.check_causal_values(lambda size: add(ones.tril() + ones.triu(1), -ones.triu(1)), 3)

_hidden()
"""
TEST_MUL = "assert mul(2, 3) == 6, \"mul(2, 3) should be 6\"\nprint('mul tested')\n"

# trick -> (the code that rides along with the wrong answer, the test it aims at)
TRICKS = {
    "a custom exception handler": ("""
get_ipython().set_custom_exc((BaseException,), lambda shell, etype, value, tb, tb_offset=None: [])
""", TEST_ADD),
    "the shell's traceback display replaced": ("""
get_ipython().showtraceback = lambda *args, **kwargs: None
""", TEST_ADD),
    "the shell's inner traceback display replaced": ("""
get_ipython()._showtraceback = lambda *args, **kwargs: None
""", TEST_ADD),
    "no traceback shown and the error taken out of the result": ("""
get_ipython().showtraceback = lambda *args, **kwargs: None
get_ipython().events.register("post_run_cell", lambda result: setattr(result, "error_in_exec", None))
""", TEST_ADD),
    "the shell class's run_code swallows exceptions": ("""
from IPython.core.interactiveshell import InteractiveShell

async def run_code(self, code_obj, result=None, *, async_=False):
    try:
        exec(code_obj, self.user_global_ns, self.user_ns)
    except BaseException:
        pass
    return False

InteractiveShell.run_code = run_code
""", TEST_ADD),
    "a code transformer wraps every cell in try/except": ("""
import ast

class Forgive(ast.NodeTransformer):
    def visit_Module(self, node):
        handler = ast.ExceptHandler(type=ast.Name("BaseException", ast.Load()), name=None, body=[ast.Pass()])
        node.body = [ast.Try(body=node.body, handlers=[handler], orelse=[], finalbody=[])]
        return ast.fix_missing_locations(node)

get_ipython().ast_transformers.append(Forgive())
""", TEST_ADD),
    "an input transformer empties the test cell": ("""
get_ipython().input_transformers_cleanup.append(
    lambda lines: ["pass\\n"] if any("add(1, 2)" in line for line in lines) else lines)
""", TEST_ADD),
    "an event callback clears the cell's output": ("""
from IPython.display import clear_output
get_ipython().events.register("post_run_cell", lambda result: clear_output())
""", TEST_ADD),
    "an event callback sets a custom exception handler before every cell": ("""
handler = lambda shell, etype, value, tb, tb_offset=None: []
get_ipython().events.register("pre_run_cell", lambda info: get_ipython().set_custom_exc((BaseException,), handler))
""", TEST_ADD),
    "a trace function swaps in a right answer while a test runs": ("""
import sys

def swap_in(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "<module>" and "add" in frame.f_code.co_names:
        frame.f_globals["add"] = lambda a, b: a + b

sys.settrace(swap_in)
""", TEST_ADD),
    "a profile function hides tracebacks while the test runs": ("""
import sys

def quiet(frame, event, arg):
    get_ipython().showtraceback = lambda *args, **kwargs: None

sys.setprofile(quiet)
""", TEST_ADD),
    "the kernel's error messages are dropped": ("""
session = get_ipython().kernel.session
send = session.send

def no_errors(stream, msg_or_type, *args, **kwargs):
    if msg_or_type == "error":
        return None
    return send(stream, msg_or_type, *args, **kwargs)

session.send = no_errors
""", TEST_ADD),
    "a builtin shadowed in the notebook's namespace": ("""
abs = lambda value: 0
""", TEST_WITH_ABS),
    "a set-up helper replaced in the notebook's namespace": ("""
check = lambda *args, **kwargs: None
""", TEST_WITH_HELPER),
    "__builtins__ replaced": ("""
import builtins
globals()["__builtins__"] = {**vars(builtins), "abs": lambda value: 0}
""", TEST_WITH_ABS),
    "the package's check gutted through its code": ("""
assert_close.__code__ = (lambda *args, **kwargs: None).__code__
""", TEST_WITH_PACKAGE),
    "an oracle's check replaced in its module": ("""
import transformer_course.oracles.masking as masking
masking.check_causal_values = lambda *args, **kwargs: None
""", TEST_WITH_ORACLE),
    "an oracle's check gutted through its code": ("""
from transformer_course.oracles.masking import check_causal_values
check_causal_values.__code__ = (lambda *args, **kwargs: None).__code__
""", TEST_WITH_ORACLE),
    "an oracle's brute force replaced by the wrong answer's": ("""
import transformer_course.oracles.masking as masking
masking._causal_table = lambda size, rule=None: torch.ones(1, 1, size, size, dtype=torch.bool)
""", TEST_WITH_ORACLE),
    "a torch function mode makes allclose agree": ("""
import torch
from torch.overrides import TorchFunctionMode

class Agree(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return True if func is torch.allclose else func(*args, **(kwargs or {}))

Agree().__enter__()
""", TEST_WITH_TORCH),
    "a torch function replaced by a wrapper shaped like torch._dynamo's": ("""
import torch
torch.allclose = torch._disable_dynamo(lambda *args, **kwargs: True)
""", TEST_WITH_TORCH),
}
# What PyTorch does to itself is no trick: creating an optimizer imports torch._dynamo, which wraps
# torch.manual_seed (the guard accepts that wrapper of the original, and only that).
OPTIMIZER_STEP = """import sys
parameter = torch.nn.Parameter(torch.ones(1))
optimizer = torch.optim.Adam([parameter])
parameter.sum().backward()
optimizer.step()
assert "torch._dynamo" in sys.modules and torch.manual_seed.__wrapped__ is torch.random.manual_seed
"""
TEST_SEEDED = """torch.manual_seed(0)
first = torch.rand(3)
torch.manual_seed(0)
assert torch.equal(first, torch.rand(3)), "the seed does not repeat"
print("seed tested")
"""


def one_exercise(name, answer, test):
    """An answer cell and its test cell, the functions renamed to ``name``."""
    return [nbgrader_cell(answer.replace("add", name), name, solution=True),
            nbgrader_cell(test.replace("add", name), f"test_{name}", grade=True, points=1)]


def notebook(tricks):
    """The set-up, then for each trick a wrong answer riding with it and its test, followed by a correct
    answer and its test: every trick must fail its own test and leave the next, correct one alone."""
    cells = [nbgrader_cell(SETUP, "setup")]
    for i, (trick, test) in enumerate(tricks):
        cells += one_exercise(f"add{i}", WRONG_ADD + trick, test)
        cells += one_exercise(f"mul{i}", CORRECT_MUL.replace("mul", "add"), TEST_MUL.replace("mul", "add"))
    return new_notebook(cells=cells)


def errors(cell):
    return [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]


@pytest.fixture(scope="module")
def graded_tricks(tmp_path_factory):
    """trick -> (its answer cell, its test cell, the next correct answer's test cell), all in one kernel."""
    executed, _ = execute_notebook(notebook(TRICKS.values()), tmp_path_factory.mktemp("tricks"), LIMITS)
    cells = executed.cells[1:]
    return {trick: (cells[4 * i], cells[4 * i + 1], cells[4 * i + 3]) for i, trick in enumerate(TRICKS)}


def test_the_wrong_answer_fails_without_tricks(tmp_path):
    executed, _ = execute_notebook(notebook([("", TEST_ADD)]), tmp_path, LIMITS)
    _, _, failing, _, passing = executed.cells
    assert "add0(1, 2) should be 3" in " ".join(errors(failing)) and errors(passing) == []


def test_an_optimizer_step_is_not_tampering(tmp_path):
    cells = notebook([]).cells + [nbgrader_cell(OPTIMIZER_STEP, "step", solution=True),
                                    nbgrader_cell(TEST_SEEDED, "test_seed", grade=True, points=1)]
    executed, problems = execute_notebook(new_notebook(cells=cells), tmp_path, LIMITS)
    assert problems == [], f"the grader saw tampering in PyTorch's own doing: {problems}"
    assert [errors(cell) for cell in executed.cells] == [[]] * 3 and "seed tested" in executed.cells[2].outputs[0].text


@pytest.mark.parametrize("trick", TRICKS)
def test_a_trick_gains_nothing(trick, graded_tricks):
    answer, test, next_test = graded_tricks[trick]
    assert errors(answer) == [], f"the trick itself failed: {errors(answer)}"
    assert errors(test), f"{trick}: the wrong answer passed its test"
    assert errors(next_test) == [], f"{trick}: the next, correct answer lost its point: {errors(next_test)}"
    assert "tested" in "".join(o.get("text", "") for o in next_test.outputs), "the next test did not run"
