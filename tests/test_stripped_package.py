"""The course package as a notebook's grading kernel sees it (autograder/stripped.py): the finished answers of
the notebook and of the later ones raise, the earlier ones work, and the grader mounts that copy."""
import re
import subprocess
import sys
import textwrap

import nbformat
import pytest

from grading import SOLUTIONS, ScratchCourse, answer_ids, grade_cells_of, nbgrader_cells, with_answers
from autograder.sandbox import package_folder, sandbox_available
from autograder.stripped import KEPT, NOTEBOOKS, build, stripped_package

pytestmark = pytest.mark.slow   # runs notebooks, kernels or the grader: `-m 'not slow'` leaves it out

ASSIGNMENT = "04_multi_head_attention"
UNAVAILABLE = f"is not available while notebook {ASSIGNMENT} is graded"


def run_with(copy_parent, code):
    """Run ``code`` in a fresh interpreter that imports transformer_course from ``copy_parent``. An editable
    install's finder would find what the copy lacks in the repository (the sandbox mounts the copy over it)."""
    script = (f"import sys\nsys.path.insert(0, {str(copy_parent)!r})\n"
              "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
              + textwrap.dedent(code))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_copy_for_04_withholds_its_answers_and_the_later_ones(tmp_path):
    build(ASSIGNMENT, package_folder(), tmp_path / "transformer_course")
    printed = run_with(tmp_path, """
        import torch, transformer_course as course
        assert course.__file__.startswith(sys.path[0]), course.__file__
        x = torch.randn(2, 3, 8)
        course.scaled_dot_product_attention(x, x, x)               # 02
        course.padding_mask(torch.tensor([[1, 0]]), 0)             # 03
        course.split_heads(x, 2)        # kept: MultiHeadAttention's tests substitute it for the student's
        for make in (lambda: course.MultiHeadAttention(8, 2), lambda: course.EncoderLayer(8, 2, 16),
                     lambda: course.Transformer(5, 5), lambda: course.greedy_decode(None, x, 3, 1, 2)):
            try:
                make()
                print("RAN")
            except NotImplementedError as error:
                print(error)
        import inspect
        print("SIGNATURE", inspect.signature(course.MultiHeadAttention.forward))
    """)
    assert "RAN" not in printed
    for name in ("MultiHeadAttention", "EncoderLayer", "Transformer", "greedy_decode"):
        assert f"the course's finished `{name}` {UNAVAILABLE}" in printed
    assert "SIGNATURE (self, query, key, value, mask=None)" in printed


def test_without_oracles_the_package_still_imports(tmp_path):
    build(ASSIGNMENT, package_folder(), tmp_path / "transformer_course", keep_oracles=False)
    assert not (tmp_path / "transformer_course" / "oracles").exists()
    printed = run_with(tmp_path, """
        import importlib.util, transformer_course
        from transformer_course.testing import require_own_work
        require_own_work("causal_mask", {})      # the gates go up without the oracles too
        print("ORACLES", importlib.util.find_spec("transformer_course.oracles"), hasattr(transformer_course, "oracles"))
    """)
    assert "ORACLES None False" in printed


def test_a_copy_is_built_once_per_assignment_and_source():
    first = stripped_package(ASSIGNMENT)
    assert stripped_package(ASSIGNMENT) == first and first.is_dir()
    assert stripped_package(ASSIGNMENT, keep_oracles=False) != first
    # A notebook of another name fails closed: no finished exercise, of any notebook, is in its copy.
    renamed = (stripped_package("ps1") / "embeddings.py").read_text()
    assert "is not available while notebook ps1 is graded" in renamed and "angle = position /" not in renamed


def test_the_tables_match_the_notebooks():
    """NOTEBOOKS lists each notebook's answer cells; each kept exercise is one its later tests substitute."""
    for assignment, exercises in NOTEBOOKS.items():
        solution = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
        assert set(answer_ids(solution)) == set(exercises), assignment
        tests = "\n".join(c.source for g, c in nbgrader_cells(solution).items() if g.startswith("test_"))
        for name in KEPT.get(assignment, ()):
            assert "." in name or re.search(rf"course\.(\w+\.)?{name}\b", tests), f"{assignment} keeps {name}: no test uses it"


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or cannot create namespaces "
                    "here: apt-get install bubblewrap")
@pytest.mark.xdist_group("grader")
def test_the_grader_shows_the_kernel_the_copy(tmp_path):
    course = ScratchCourse(tmp_path, ASSIGNMENT)
    answers = course.solution_answers()
    reader = answers["MultiHeadAttention"] + (
        "\nimport transformer_course\nprint('FILE<' + open(transformer_course.attention.__file__).read() + '>FILE')")
    course.submit("solved", with_answers(course.release, dict(answers, MultiHeadAttention=reader)))
    course.submit("finished", with_answers(course.release, dict(
        answers, MultiHeadAttention="from transformer_course import MultiHeadAttention")))
    subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--workers", "2"], cwd=tmp_path,
                   check=True, capture_output=True, timeout=900)
    scores = course.scores()
    assert all(score == top for score, top in scores["solved"].values()), scores["solved"]
    tests = grade_cells_of(course.release, "MultiHeadAttention")
    assert tests and all(scores["finished"][g][0] == 0 for g in tests), scores["finished"]
    assert all(scores["finished"][g][0] == top for g, (_, top) in scores["finished"].items() if g not in tests)
    executed = nbformat.read(course.path("autograded", "solved"), as_version=4)
    printed = nbgrader_cells(executed)["MultiHeadAttention"].outputs[0].text
    seen = printed[printed.index("FILE<"):printed.index(">FILE")]
    assert f"`MultiHeadAttention` {UNAVAILABLE}" in seen
    assert "_stacked_linear(query" not in seen and "self.w_q = nn.Linear" not in seen
