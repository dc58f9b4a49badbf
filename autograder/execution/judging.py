"""The judge's half of a test cell, run in the grader's own process (see course_testkit/probing.py).

A judged test cell holds imports, function definitions and ``run_test(probe, judge)`` calls, nothing else.
The sandboxed kernel runs the cell, so the probes call the student's code and send their data out; here the
cell's source (the sanitized notebook's: nbgrader restored it from the gradebook, so the student cannot have
changed it) is compiled again without its calls, and each judge gets its probe's data, loaded with the safe
loader. The verdict (the judge's AssertionError message, or nothing) and whatever the judges printed replace
the cell's outputs from the kernel: a student's code can send only wrong data, never a verdict. The judges draw
the hidden tests' inputs from the grader's own copy of the submission's secret (``judge_cell``'s ``seed``), never
from the kernel's.

A test cell not written this way (an instructor's own plain ``assert`` cell) is not judged here: it passes or
fails on the kernel's word, as in plain nbgrader (execute.py; ``python -m autograder grade`` names such cells).
"""
import ast
import base64
import binascii
import contextlib
import io
from dataclasses import dataclass, field

# The kit's protocol is torch-free; its probes and oracles (and torch) are imported only when a cell is judged:
# `python -m autograder --help` and the instructor's side of grading stay quick.
from course_testkit.protocol import JUDGE_OUTSIDE, PROBE_MIME, SEED_VARIABLE  # noqa: F401  (imported from here too)

MAX_CELL_BYTES = 64 * 2**20   # base64 text of all the probe data one cell may send
MAX_VERDICT = 1_000           # characters of a judge's message: it may quote data the student's code chose


def is_judged(source):
    """Whether a test cell is written as probe and judge (it calls run_test at the top level)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "run_test(" in source   # a broken judged cell still counts as judged: it fails closed
    return any(_run_test_call(node) for node in tree.body)


def all_judged(notebook):
    """Whether every graded test cell of ``notebook`` is judged: then its kernel needs no oracle."""
    from ..cells import is_test

    return all(is_judged(cell.source) for cell in notebook.cells if is_test(cell))


def _run_test_call(node):
    """(probe name, judge name) if ``node`` is ``run_test(NAME, NAME)``, else None."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return None
    call = node.value
    if not (isinstance(call.func, ast.Name) and call.func.id == "run_test" and not call.keywords
            and len(call.args) == 2 and all(isinstance(a, ast.Name) for a in call.args)):
        return None
    return call.args[0].id, call.args[1].id


def kernel_source(source):
    """A judged cell as the grader's kernel runs it: the bodies of the functions and classes the probes do not reach
    (the judges and their helpers) replaced by ``pass``, every line kept in its place. The judges run in the grader
    from the full source, so the kernel (and the student's code in it) never holds what the tests check or expect.
    A cell that does not parse is sent as it is: it fails there, closed."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    definitions = {node.name: node for node in tree.body
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    reached = _reached([probe for node in tree.body if (pair := _run_test_call(node)) for probe in pair[:1]],
                       definitions)
    lines = source.splitlines(keepends=True)
    for name, node in definitions.items():
        if name not in reached:
            first, last = node.body[0].lineno, node.body[-1].end_lineno
            indent = " " * node.body[0].col_offset
            lines[first - 1:last] = [f"{indent}pass\n"] + ["\n"] * (last - first)
    return "".join(lines)


def _reached(names, definitions):
    """The names of ``definitions`` that the functions ``names`` use, directly or through one another."""
    reached, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in reached or name not in definitions:
            continue
        reached.add(name)
        todo += [n.id for n in ast.walk(definitions[name]) if isinstance(n, ast.Name)]
    return reached


class CellFormatError(Exception):
    """A judged cell with statements a judge may not run (a course bug: the cell fails, closed)."""


_ALLOWED = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)


def _judges(source):
    """The judges of a judged cell, in the order of its run_test calls, defined in a fresh namespace."""
    tree = ast.parse(source)
    calls, kept = [], []
    for node in tree.body:
        pair = _run_test_call(node)
        if pair:
            calls.append(pair)
        elif isinstance(node, _ALLOWED) or _is_constant(node):
            kept.append(node)
        else:
            raise CellFormatError(f"line {node.lineno}: a judged test cell may hold only imports, definitions "
                                  "and run_test(probe, judge) calls")
    namespace = _prelude()
    exec(compile(ast.Module(body=kept, type_ignores=[]), "<judged test cell>", "exec"), namespace)
    return [namespace[judge] for _, judge in calls]


def _is_constant(node):
    """A docstring, or NAME = a literal (a tolerance, a description)."""
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant)
    if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        try:
            ast.literal_eval(node.value)
        except ValueError:
            return False
        return True
    return False


def _prelude():
    """What every judge may use without importing it: the notebooks' set-up imports and the test helpers."""
    import math

    import torch
    import torch.nn.functional as F
    from torch import nn

    from course_testkit import probing, testing
    return {"__name__": "judged_test_cell", "math": math, "torch": torch, "nn": nn, "F": F,
            "Raised": probing.Raised, "returned": probing.returned, "replayed": probing.replayed,
            "assert_raised_value_error": probing.assert_raised_value_error, "check_tensor": testing.check_tensor,
            "secret_seed": probing.secret_seed, "secret_generator": probing.secret_generator,
            "assert_close": testing.assert_close, "same_random_numbers": testing.same_random_numbers}


@dataclass
class Verdict:
    passed: bool
    message: str = ""   # why it failed, in the judge's words
    printed: str = ""   # what the judges printed
    flags: list = field(default_factory=list)   # for a person: results bit-identical to a forbidden library's


def take_probe_data(message):
    """The base64 text of probe data if an IOPub message carries some, else None."""
    if message["msg_type"] != "display_data":
        return None
    data = message["content"].get("data", {})
    return data.get(PROBE_MIME) if isinstance(data.get(PROBE_MIME), str) else None


def judge_cell(source, sent, seed):
    """The verdict on a judged test cell, given the base64 texts its kernel sent, in order, and the secret its
    kernel drew the hidden tests' inputs from (the judges draw them again from it)."""
    try:
        judges = _judges(source)
    except (SyntaxError, CellFormatError, NameError, ImportError) as error:
        return Verdict(False, f"the grader could not read this test cell ({type(error).__name__}: {error})")
    if len(sent) < len(judges):
        return Verdict(False, "the test cell stopped before all its tests sent their data: an earlier error in "
                              "this cell, or in your code, stopped it (see the error above)")
    if len(sent) > len(judges):
        return Verdict(False, f"the test cell sent {len(sent)} results for {len(judges)} tests: something "
                              "besides the tests sent data")
    printed = io.StringIO()
    from course_testkit.probing import flags_collected, judging_with

    with flags_collected() as flags:
        for judge, text in zip(judges, sent):
            with contextlib.redirect_stdout(printed), judging_with(seed):
                failure = _judge_one(judge, text)
            if failure:
                return Verdict(False, failure, printed.getvalue(), flags)
    return Verdict(True, "", printed.getvalue(), flags)


def _judge_one(judge, text):
    """None if the judge passes the probe's data, else its message."""
    from course_testkit.probing import ProbeDataError, Raised, unpack

    if text is None:
        return f"your code returned more data than the grader reads ({MAX_CELL_BYTES // 2**20} MB in one cell)"
    try:
        found = unpack(base64.b64decode(text.encode("ascii"), validate=True))
    except (ProbeDataError, binascii.Error, UnicodeEncodeError) as error:
        return f"the data your code returned could not be read: {error}"
    if isinstance(found, Raised):
        return f"{found.type_name}: {found.first_line}"
    try:
        judge(found)
    except AssertionError as error:
        return str(error)[:MAX_VERDICT] or "a test failed"
    except MemoryError:
        return ("checking what your code returned needed more memory than the grader allows: does your code return "
                "far more data than the test asks for?")
    except Exception as error:   # data of an unexpected form: the judge could not read it
        return (f"the test could not check what your code returned ({type(error).__name__}: "
                f"{str(error)[:200]}): check the types and shapes your code returns")
    return None
