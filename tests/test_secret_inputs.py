"""Secret inputs, through the real grader: a hidden test draws its inputs from a secret the grader chooses for each
submission (the kernel gets it in its environment, the judge its own copy, never the kernel's word), so knowing the
test's code is not enough to pass it.

One run of `python -m autograder grade`, sandboxed, on a small assignment built here, without COURSE_TEST_SEED: the
grader draws a secret per submission, as it does for a course. Two correct submissions pass under two different
secrets; a blank answer that sends payloads recorded under another secret, an answer that looks its results up in a
table of the inputs known in advance, and a tensor subclass that lies about its dtype and device earn nothing there.
"""
import base64
import subprocess
import sys

import nbformat
import pytest
import torch
from nbformat.v4 import new_notebook
from support.courses import GRADING_ENV, ScratchCourse
from support.notebooks import nbgrader_cell, nbgrader_cells, with_answers

from autograder.execution.sandbox import sandbox_available
from course_testkit import probing

pytestmark = [pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or cannot "
                                 "create namespaces here: apt-get install bubblewrap"),
              pytest.mark.xdist_group("grader"), pytest.mark.slow]

ASSIGNMENT = "ps1"
PUBLISHED_SEED = 20261128   # the secret the course's own tests fix (tests/support/courses.py): anyone can read it

SETUP = "import torch\nfrom course_testkit.probing import attempt, returned, run_test, secret_generator\n"
DOUBLE = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n"
TEST_DOUBLE = '''def probe():
    return attempt(double, torch.arange(4.0))

def judge(found):
    doubled = returned(found, "double(torch.arange(4.0))")
    assert torch.equal(doubled, 2 * torch.arange(4.0)), f"double(torch.arange(4.0)) gave {doubled.tolist()}"

run_test(probe, judge)
### BEGIN HIDDEN TESTS
def hidden_inputs():
    return torch.randn(3, 5, generator=secret_generator("double"))

def hidden_probe():
    return attempt(double, hidden_inputs())

def hidden_judge(found):
    doubled = returned(found, "double(x)")
    assert torch.equal(doubled, 2 * hidden_inputs()), "double(x) is wrong on the hidden test's inputs"

run_test(hidden_probe, hidden_judge)
### END HIDDEN TESTS
'''
# An instructor's own plain assert cell: its verdict is the kernel's word, and the grader says so.
TEST_DOUBLE_PLAIN = 'assert torch.equal(double(torch.ones(2)), 2 * torch.ones(2)), "double(torch.ones(2)) should be 2s"\n'
AS_FLOAT64 = "def as_float64(x):\n    ### BEGIN SOLUTION\n    return x.double()\n    ### END SOLUTION\n"
TEST_AS_FLOAT64 = '''def probe():
    result = as_float64(torch.arange(3.0))
    return {"dtype": str(result.dtype), "device": str(result.device), "values": result}

def judge(found):
    assert found["dtype"] == "torch.float64", f"as_float64 returned {found['dtype']}, not torch.float64"
    values = found["values"]   # the tensor's own data: its dtype is what was sent, whatever the answer says
    assert values.dtype == torch.float64 and torch.equal(values, torch.arange(3.0, dtype=torch.float64)), \\
        "as_float64(torch.arange(3.0)) is not those values in float64"

run_test(probe, judge)
### BEGIN HIDDEN TESTS
def hidden_inputs():
    return 100 * torch.randn(4, generator=secret_generator("as_float64"))

def hidden_probe():
    result = as_float64(hidden_inputs())
    return {"dtype": str(result.dtype), "device": str(result.device), "values": result}

def hidden_judge(found):
    values = found["values"]
    assert values.dtype == torch.float64 and torch.equal(values, hidden_inputs().double()), \\
        "as_float64 is wrong on the hidden test's inputs"

run_test(hidden_probe, hidden_judge)
### END HIDDEN TESTS
'''
TESTS = {"test_double": TEST_DOUBLE, "test_double_plain": TEST_DOUBLE_PLAIN, "test_as_float64": TEST_AS_FLOAT64}


def source_notebook():
    cells = [nbgrader_cell(SETUP, "setup"), nbgrader_cell(DOUBLE, "double", solution=True),
             nbgrader_cell(TEST_DOUBLE, "test_double", grade=True, points=2),
             nbgrader_cell(TEST_DOUBLE_PLAIN, "test_double_plain", grade=True, points=1),
             nbgrader_cell(AS_FLOAT64, "as_float64", solution=True),
             nbgrader_cell(TEST_AS_FLOAT64, "test_as_float64", grade=True, points=2)]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                              "language": "python"}})


RIGHT_DOUBLE = 'import os\nprint("SEED", os.environ["COURSE_TEST_SEED"])\n\ndef double(x):\n    return 2 * x\n'
RIGHT_AS_FLOAT64 = "def as_float64(x):\n    return x.double()\n"
# Right on every input known in advance: the visible tests', and the hidden test's under the published secret.
TABLE_DOUBLE = f'''from course_testkit.probing import judging_with

_KNOWN = [torch.arange(4.0), torch.ones(2)]
with judging_with({PUBLISHED_SEED}):
    _KNOWN.append(torch.randn(3, 5, generator=secret_generator("double")))
_TABLE = {{tuple(x.flatten().tolist()): 2 * x for x in _KNOWN}}

def double(x):
    return _TABLE.get(tuple(x.flatten().tolist()), torch.zeros_like(x))
'''
LIAR_AS_FLOAT64 = '''class _Liar(torch.Tensor):
    @property
    def dtype(self):
        return torch.float64

    @property
    def device(self):
        return torch.device("cpu")

def as_float64(x):
    return x.clone().as_subclass(_Liar)   # still float32: only its .dtype says float64
'''


def recorded_payloads(seed):
    """The base64 texts a right answer's kernel sends, run_test by run_test, under the secret ``seed``."""
    with probing.judging_with(seed):
        found = [2 * torch.arange(4.0), 2 * torch.randn(3, 5, generator=probing.secret_generator("double"))]
        for x in (torch.arange(3.0), 100 * torch.randn(4, generator=probing.secret_generator("as_float64"))):
            found.append({"dtype": "torch.float64", "device": "cpu", "values": x.double()})
    return [base64.b64encode(probing.pack(data)).decode("ascii") for data in found]


def replaying_blank(payloads):
    """The release's blank double, and base64.b64encode replaced so that the probes' data is ``payloads``, in order."""
    return f'''import base64
_RECORDED = {payloads!r}
_b64encode = base64.b64encode

def _replay(data, *args, **kwargs):
    if data[:2] == b"PK" and _RECORDED:   # torch.save's zip: a probe's data
        return _RECORDED.pop(0).encode("ascii")
    return _b64encode(data, *args, **kwargs)

base64.b64encode = _replay

def double(x):
    raise NotImplementedError()
'''


STUDENTS = {   # student -> the answers that replace the release's blanks
    "right_a": {"double": RIGHT_DOUBLE, "as_float64": RIGHT_AS_FLOAT64},
    "right_b": {"double": RIGHT_DOUBLE, "as_float64": RIGHT_AS_FLOAT64},
    "replayer": {"double": replaying_blank(recorded_payloads(PUBLISHED_SEED))},
    "table": {"double": TABLE_DOUBLE, "as_float64": RIGHT_AS_FLOAT64},
    "liar": {"double": RIGHT_DOUBLE, "as_float64": LIAR_AS_FLOAT64},
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(the course, what the grade command printed), after one grading run of every student."""
    root = tmp_path_factory.mktemp("secret")
    course = ScratchCourse(root, ASSIGNMENT, source=source_notebook())
    for student, answers in STUDENTS.items():
        course.submit(student, with_answers(course.release, answers))
    env = {k: v for k, v in GRADING_ENV.items() if k != "COURSE_TEST_SEED"}   # a secret drawn per submission
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--workers", "2"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return course, done.stdout


def outputs(course, student, grade_id):
    """The text of a cell's outputs in the student's autograded notebook."""
    cell = nbgrader_cells(nbformat.read(course.path("autograded", student), as_version=4))[grade_id]
    return "".join(o.get("text", "") + f"{o.get('ename', '')}: {o.get('evalue', '')}" for o in cell.outputs)


def test_right_answers_pass_under_two_secrets(graded):
    course, _ = graded
    scores = course.scores()
    seeds = set()
    for student in ("right_a", "right_b"):
        assert all(score == most for score, most in scores[student].values()), (student, scores[student])
        seeds.add(outputs(course, student, "double").split("SEED ")[1].split()[0])
    assert len(seeds) == 2 and str(PUBLISHED_SEED) not in seeds, f"the grader drew {seeds}"


def test_payloads_recorded_under_another_secret_earn_nothing(graded):
    course, _ = graded
    assert all(score == 0 for score, _ in course.scores()["replayer"].values()), course.scores()["replayer"]
    assert "double(x) is wrong on the hidden test's inputs" in outputs(course, "replayer", "test_double")


def test_a_table_of_the_inputs_known_in_advance_fails_the_hidden_part(graded):
    course, _ = graded
    scores = course.scores()["table"]
    assert scores["test_double"] == (0, 2) and scores["test_double_plain"] == (1, 1), scores
    assert scores["test_as_float64"] == (2, 2), scores
    assert "double(x) is wrong on the hidden test's inputs" in outputs(course, "table", "test_double")


def test_a_tensor_that_lies_about_its_dtype_and_device_earns_nothing(graded):
    course, _ = graded
    scores = course.scores()["liar"]
    assert scores["test_as_float64"] == (0, 2) and scores["test_double"] == (2, 2), scores
    assert "as_float64(torch.arange(3.0)) is not those values in float64" in outputs(course, "liar", "test_as_float64")


def test_the_grader_names_the_test_cells_whose_verdict_is_the_kernels_word(graded):
    _, printed = graded
    assert ("autograder: 1 test cell of ps1 is not written as probe and judge (test_double_plain): its verdict is the "
            "kernel's word, as in plain nbgrader") in printed, printed

