"""Attacks on judged test cells gain nothing: the verdict is made in the grader's process, never in the kernel.

Notebook 02's test cells are written as probe and judge (course_testkit/probing.py). Each attack below rides
in the answer cell with the release's blank answer (or a wrong one), as a determined student who has read this
repository could write it; the notebook is the sanitized form the grader runs (set-up, answer, the six test cells
with their hidden parts). Every test cell must fail, as it does for the blank answer alone. The classes: rewriting
what the kernel reports, changing things while a test cell runs, reaching the checks by introspection, restarting
the kernel, reading expected values from frames, stand-in oracles, forged or malicious probe data.
"""
import base64
import functools
import io
import os
import pickle
import zipfile

import nbformat
import pytest
from support.notebooks import SOLUTIONS, nbgrader_cells

from autograder.cells import is_test
from autograder.execution.execute import execute_notebook
from autograder.execution.sandbox import Limits, sandbox_available
from autograder.execution.stripped import stripped_package
from course_testkit.probing import PROBE_MIME

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or does not "
                                 "work on this machine (user namespaces disabled?): the sandbox cannot be tested"),
              pytest.mark.xdist_group("judged_attacks"), pytest.mark.slow]

ASSIGNMENT = "02_attention"
EXERCISE = "scaled_dot_product_attention"
LIMITS = Limits(cell_timeout=30, total_timeout=240, memory_mb=3072, processes=64, output_bytes=50_000)
# The package as the grader shows it to this notebook's kernel: no finished answer of 02 or later, no oracles.
PACKAGE = stripped_package(ASSIGNMENT, keep_oracles=False) if sandbox_available() else None

BLANK = f"def {EXERCISE}(query, key, value, mask=None, dropout=None):\n    raise NotImplementedError()\n"
# Right shapes and a softmax over the keys, but no scale and no mask: wrong in every test cell but the errors'.
WRONG = f"""def {EXERCISE}(query, key, value, mask=None, dropout=None):
    weights = (query @ key.transpose(-2, -1)).softmax(-1)
    return weights @ value, weights
"""


def _payload(data):
    return f"{{{PROBE_MIME!r}: {base64.b64encode(data).decode()!r}}}"


def _evil_pickle(marker):
    """torch.save-shaped data whose pickle would run a command if it were loaded with plain pickle."""
    class Evil:
        def __reduce__(self):
            return (open, (marker, "w"))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"result": Evil()}, protocol=2))
        archive.writestr("archive/version", "3\n")
    return buffer.getvalue()


@functools.cache   # 0.6 s to deflate, and every test builds the attacks
def _compressed():
    """A zip with a deflated entry that expands to 100 MB: refused before it is read."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"\0" * (100 * 2**20))
    return buffer.getvalue()


def attacks(marker):
    """name -> code that rides along after the answer."""
    return {**_reporting_attacks(), **_probe_data_attacks(marker), **_hook_attacks(), **_kernel_attacks(),
            **_answer_attacks()}


def _reporting_attacks():
    """Attacks on what the kernel reports, and on the test helpers that report it."""
    return {
        "the kernel's message sending turns errors into ok": """
kernel = get_ipython().kernel
_send = kernel.session.send
def _send_ok(stream, msg_or_type, content=None, *args, **kwargs):
    if msg_or_type == "error":
        return None
    if msg_or_type == "execute_reply" and isinstance(content, dict) and content.get("status") == "error":
        content = {"status": "ok", "execution_count": content.get("execution_count"), "user_expressions": {}, "payload": []}
    return _send(stream, msg_or_type, content, *args, **kwargs)
kernel.session.send = _send_ok
""",
        "a custom exception handler hides every error": """
get_ipython().set_custom_exc((BaseException,), lambda shell, etype, value, tb, tb_offset=None: [])
""",
        "every later statement runs inside try/except": """
import ast
class _Forgive(ast.NodeTransformer):
    def visit_Module(self, node):
        handler = ast.ExceptHandler(type=ast.Name("BaseException", ast.Load()), name=None, body=[ast.Pass()])
        node.body = [ast.Try(body=node.body, handlers=[handler], orelse=[], finalbody=[])]
        return ast.fix_missing_locations(node)
get_ipython().ast_transformers.append(_Forgive())
""",
        "run_test replaced by one that only prints success": """
def run_test(probe, judge):
    print("Visible tests passed.")
""",
        "run_test replaced by one that judges forged data in the kernel": """
def run_test(probe, judge):
    try:
        judge({})
    except Exception:
        pass
""",
    }


def _probe_data_attacks(marker):
    """Forged, extra, oversized or unsafe probe data."""
    return {
        "forged probe data: uniform weights and a zero output": """
import base64, io
from IPython.display import display
from course_testkit.probing import PROBE_MIME, pack
def run_test(probe, judge):
    forged = {"result": (torch.zeros(2, 5), torch.full((2, 3), 1 / 3)), "hand_made": (torch.zeros(1, 2), torch.zeros(1, 2))}
    display({PROBE_MIME: base64.b64encode(pack(forged)).decode()}, raw=True)
""",
        "extra probe data sent from the answer itself": f"""
from IPython.display import display
from course_testkit.probing import pack
import base64
_blank = {EXERCISE}
def {EXERCISE}(*args, **kwargs):
    display({{PROBE_MIME: base64.b64encode(pack({{}})).decode()}}, raw=True)
    return _blank(*args, **kwargs)
PROBE_MIME = {PROBE_MIME!r}
""",
        "a pickle that runs code when loaded": f"""
from IPython.display import display
def run_test(probe, judge):
    display({_payload(_evil_pickle(marker))}, raw=True)
""",
        "a compressed payload that expands to 100 MB": f"""
from IPython.display import display
def run_test(probe, judge):
    display({_payload(_compressed())}, raw=True)
""",
        "the real probe data edited before it is sent: checks' cases dropped": """
import base64
from IPython.display import display
from course_testkit.probing import PROBE_MIME, attempt, pack
def run_test(probe, judge):
    found = attempt(probe)
    if isinstance(found, dict):
        found = {key: [] if isinstance(value, list) else value for key, value in found.items()}
    display({PROBE_MIME: base64.b64encode(pack(found)).decode()}, raw=True)
""",
        "probing.pack sends a pickled object instead of plain data": """
import pickle
import course_testkit.probing as _probing
_probing.pack = lambda found: pickle.dumps(found)
""",
    }


def _hook_attacks():
    """Threads and hooks that change the tests while they run."""
    return {
        "the test helpers replaced from a thread": """
import threading, time
import course_testkit.testing as _testing, course_testkit.probing as _probing
def _flip():
    for _ in range(2000):
        torch.allclose = lambda *a, **k: True
        _testing.check_tensor = lambda *a, **k: None
        _probing.returned = lambda value, what: value
        time.sleep(0.005)
threading.Thread(target=_flip, daemon=True).start()
""",
        "an import hook hands the tests a stand-in oracle": """
import builtins, types
_import = builtins.__import__
_fake = types.ModuleType("course_testkit.oracles.attention")
for _name in ("check_attention", "check_batched", "check_masked", "check_dropout"):
    setattr(_fake, _name, lambda *a, **k: None)
_fake.call = lambda answer, what, *a, **k: (torch.zeros(1), torch.zeros(1))
_fake.shapes = lambda *a: ""
def _hooked(name, globals=None, locals=None, fromlist=(), level=0):
    if name.startswith("course_testkit.oracles"):
        return _fake
    return _import(name, globals, locals, fromlist, level)
builtins.__import__ = _hooked
import sys
sys.modules["course_testkit.oracles.attention"] = _fake
""",
        "a profile hook that empties the judges": """
import sys
def _profile(frame, event, arg):
    if event == "call" and frame.f_code.co_name in ("judge", "hidden_judge"):
        frame.f_globals["judge"] = frame.f_globals["hidden_judge"] = lambda found: None
sys.setprofile(_profile)
""",
        "a post_execute callback clears the errors": """
from IPython.display import clear_output
get_ipython().events.register("post_execute", lambda: clear_output())
""",
    }


def _kernel_attacks():
    """The kernel's handlers and life taken over by the answer."""
    return {
        "the kernel's execute handler answers ok without running test cells": """
kernel = get_ipython().kernel
_execute = kernel.shell_handlers["execute_request"]
async def _skip(stream, ident, parent):
    if "run_test(" in parent["content"].get("code", ""):
        kernel.session.send(stream, "execute_reply", {"status": "ok", "execution_count": 1, "user_expressions": {},
                                                     "payload": []}, parent, ident=ident)
        return
    return await _execute(stream, ident, parent)
kernel.shell_handlers["execute_request"] = _skip
""",
        "the kernel killed by the answer cell": """
import os
os._exit(0)
""",
        "an input transformer rewrites the test cells before they run": """
def _rewrite(lines):
    return [line.replace("run_test(hidden_probe, hidden_judge)", "pass") for line in lines]
get_ipython().input_transformers_post.append(_rewrite)
""",
        "a thread kills the kernel while the hidden tests run": """
import os, threading, time
def _later():
    time.sleep(3)
    os.kill(os.getpid(), 9)
threading.Thread(target=_later, daemon=True).start()
""",
    }


def _answer_attacks():
    """Answers that read the expected value or reach a finished answer or an oracle."""
    return {
        "the answer reads the expected value from its callers' frames": f"""
import sys
def {EXERCISE}(query, key, value, mask=None, dropout=None):
    frame = sys._getframe(1)
    while frame is not None:
        for name in ("expected", "expected_output", "reference"):
            if name in frame.f_locals:
                return frame.f_locals[name]
        frame = frame.f_back
    raise NotImplementedError()
""",
        "a tensor subclass whose comparisons always pass": f"""
class _Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.__eq__):
            return True
        return super().__torch_function__(func, types, args, kwargs or {{}})
def {EXERCISE}(query, key, value, mask=None, dropout=None):
    weights = torch.zeros(*query.shape[:-1], key.shape[-2]).as_subclass(_Liar)
    return torch.zeros(*query.shape[:-1], value.shape[-1]).as_subclass(_Liar), weights
""",
        "the course's finished answer imported": f"""
from transformer_course import {EXERCISE}
""",
        "the finished answer executed from the package's source file": f"""
import transformer_course.attention as _attention
_namespace = dict(vars(_attention))
exec(open(_attention.__file__).read(), _namespace)
{EXERCISE} = _namespace["{EXERCISE}"]
""",
        "the oracle's own attention called from the answer": f"""
def {EXERCISE}(query, key, value, mask=None, dropout=None):
    from course_testkit.oracles import attention as _oracle
    return _oracle._formula(query, key, value, mask)[::-1]
""",
    }


def _judged_notebook(answer):
    """The sanitized notebook as the grader runs it: set-up, the answer, and the exercise's test cells."""
    solution = nbformat.read(SOLUTIONS / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    cells = nbgrader_cells(solution)
    answer_cell = cells[EXERCISE]
    answer_cell.source = answer
    tests = [c for c in solution.cells if c.cell_type == "code" and is_test(c)]
    solution.cells = [cells["setup"], answer_cell] + tests
    return solution


def _failing(executed):
    return [c.metadata["nbgrader"]["grade_id"] for c in executed.cells
            if is_test(c) and any(o.output_type == "error" for o in c.outputs)]


def _test_ids(notebook):
    return [c.metadata["nbgrader"]["grade_id"] for c in notebook.cells if is_test(c)]


def test_the_solution_passes(tmp_path):
    solution = nbgrader_cells(nbformat.read(SOLUTIONS / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4))
    executed, _ = execute_notebook(_judged_notebook(solution[EXERCISE].source), tmp_path, LIMITS, package=PACKAGE)
    assert _failing(executed) == []


def test_the_blank_and_the_wrong_answer_fail(failing_alone):
    ids = set(_test_ids(_judged_notebook(BLANK)))
    assert failing_alone[BLANK] == ids
    # the batch cell passes: the answer gives on each slice what it gives for that slice alone
    assert failing_alone[WRONG] == ids - {f"test_{EXERCISE}_batched"}


@pytest.fixture(scope="module")
def marker(tmp_path_factory):
    return str(tmp_path_factory.mktemp("pickle") / "ran")


@pytest.fixture(scope="module")
def failing_alone(tmp_path_factory):
    """The test cells each answer fails with no attack."""
    return {answer: set(_failing(execute_notebook(_judged_notebook(answer), tmp_path_factory.mktemp("alone"), LIMITS,
                                                  package=PACKAGE)[0]))
            for answer in (BLANK, WRONG)}


# Each attack with the blank answer; a few with the wrong one too (a kernel each: they take a while).
CASES = [pytest.param(name, BLANK, id=f"blank-{name[:50]}") for name in attacks("marker")] + [
    pytest.param(name, WRONG, id=f"wrong-{name[:50]}") for name in (
        "the kernel's message sending turns errors into ok", "forged probe data: uniform weights and a zero output",
        "the real probe data edited before it is sent: checks' cases dropped",
        "the test helpers replaced from a thread")]


@pytest.mark.parametrize("name, answer", CASES)
def test_an_attack_gains_nothing(name, answer, marker, failing_alone, tmp_path):
    executed, _ = execute_notebook(_judged_notebook(answer + attacks(marker)[name]), tmp_path, LIMITS, package=PACKAGE)
    gained = failing_alone[answer] - set(_failing(executed))
    assert not gained, f"'{name}' passed test cells the answer alone fails: {sorted(gained)}"
    assert not os.path.exists(marker), "the grader loaded probe data with code in it"


def test_through_the_grader_the_solution_gets_full_marks_and_a_forger_nothing(tmp_path):
    """`python -m autograder grade` end to end: nbgrader records the judges' verdicts in the gradebook."""
    import subprocess
    import sys

    from support.courses import GRADING_ENV, ScratchCourse
    from support.notebooks import with_answers

    course = ScratchCourse(tmp_path, ASSIGNMENT)
    course.submit("solution", with_answers(course.release, course.solution_answers()))
    course.submit("untouched", course.release)
    forger = attacks("unused")["forged probe data: uniform weights and a zero output"]
    course.submit("forger", with_answers(course.release, {EXERCISE: BLANK + forger}))
    subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--workers", "2"], cwd=tmp_path,
                   env=GRADING_ENV, check=True, capture_output=True)
    scores = course.scores()
    assert all(score == most for score, most in scores["solution"].values()), scores["solution"]
    for student in ("untouched", "forger"):
        assert all(score == 0 for score, _ in scores[student].values()), (student, scores[student])
