"""The course package as a notebook's grading kernel sees it (autograder/execution/stripped.py): the finished answers of
the notebook and of the later ones raise, none kept, the earlier ones work, and the grader mounts that copy. What is
withheld comes from the exercise registry (course_testkit/exercises.py)."""
import ast
import subprocess
import sys
import textwrap

import nbformat
import pytest
from support.courses import ScratchCourse
from support.notebooks import SOLUTIONS, answer_ids, grade_cells_of, nbgrader_cells, with_answers

from autograder.execution.sandbox import sandbox_available
from autograder.execution.stripped import build, strip_source, stripped_package, withheld
from autograder.registry import module_file, package_folder, piece_path, registry

pytestmark = pytest.mark.slow   # runs notebooks, kernels or the grader: `-m 'not slow'` leaves it out

ASSIGNMENT = "04_multi_head_attention"
UNAVAILABLE = f"is not available while notebook {ASSIGNMENT} is graded"


def run_with(copy_parent, code):
    """Run ``code`` in a fresh interpreter that imports transformer_course and course_testkit from ``copy_parent``.
    An editable install's finder would find what the copy lacks in the repository (the sandbox mounts the copy over
    it)."""
    script = (f"import sys\nsys.path.insert(0, {str(copy_parent)!r})\n"
              "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
              + textwrap.dedent(code))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_copy_for_04_withholds_its_answers_and_the_later_ones(tmp_path):
    build(ASSIGNMENT, tmp_path)
    printed = run_with(tmp_path, """
        import torch, transformer_course as course
        assert course.__file__.startswith(sys.path[0]), course.__file__
        x = torch.randn(2, 3, 8)
        course.scaled_dot_product_attention(x, x, x)               # 02
        course.padding_mask(torch.tensor([[1, 0]]), 0)             # 03
        for make in (lambda: course.split_heads(x, 2), lambda: course.merge_heads(x.view(2, 3, 2, 4)),
                     lambda: course.MultiHeadAttention(8, 2), lambda: course.EncoderLayer(8, 2, 16),
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
    for name in ("split_heads", "merge_heads", "MultiHeadAttention", "EncoderLayer", "Transformer", "greedy_decode"):
        assert f"the course's finished `{name}` {UNAVAILABLE}" in printed
    assert "SIGNATURE (self, query, key, value, mask=None)" in printed


def test_without_oracles_the_package_still_imports(tmp_path):
    build(ASSIGNMENT, tmp_path, keep_oracles=False)
    assert not (tmp_path / "course_testkit" / "oracles").exists() and (tmp_path / "course_testkit" / "probes").is_dir()
    printed = run_with(tmp_path, """
        import importlib.util, course_testkit
        from course_testkit import probing, testing
        from course_testkit.probes import attention
        assert course_testkit.__file__.startswith(sys.path[0]), course_testkit.__file__
        print("ORACLES", importlib.util.find_spec("course_testkit.oracles"))
    """)
    assert "ORACLES None" in printed


def test_a_copy_is_built_once_per_assignment_and_source():
    first = stripped_package(ASSIGNMENT)
    assert stripped_package(ASSIGNMENT) == first and first.is_dir()
    assert stripped_package(ASSIGNMENT, keep_oracles=False) != first
    # A notebook of another name fails closed: no finished exercise, of any notebook, is in its copy.
    renamed = (stripped_package("ps1") / "transformer_course" / "embeddings.py").read_text()
    assert "is not available while notebook ps1 is graded" in renamed and "angle = position /" not in renamed


def test_a_piece_in_a_subpackage_is_withheld_in_its_module(tmp_path):
    """FINISHED may name a piece of a subpackage's module, "run.loop.train": the copy strips run/loop.py."""
    package, kit = tmp_path / "sources" / "transformer_course", tmp_path / "sources" / "course_testkit"
    (package / "run").mkdir(parents=True)
    kit.mkdir()
    (package / "__init__.py").write_text("")
    (package / "run" / "__init__.py").write_text("")
    (package / "run" / "loop.py").write_text("def train():\n    return 'finished'\n\n\ndef kept():\n    return 'kept'\n")
    (package / "schedules.py").write_text("def lr():\n    return 'finished'\n")
    (kit / "exercises.py").write_text(
        'NOTEBOOKS = {"01_first": ("lr",), "02_second": ("train",)}\nTEST_MODULES = {}\n'
        'FINISHED = {"lr": ("schedules.lr",), "train": ("run.loop.train",)}\nEXTRAS = {}\n'
        'KERNEL_FIRST_USE_IMPORTS = {}\nJUDGES_FIRST_USE_IMPORTS = {}\nNOT_COMPARED = frozenset()\n')
    assert piece_path("run.loop.train") == ("run.loop", "train") and str(module_file("run.loop")) == "run/loop.py"
    assert withheld("02_second", kit) == {("run.loop", "train"): ("train", True)}
    build("02_second", tmp_path / "copy", sources={"transformer_course": package, "course_testkit": kit})
    printed = run_with(tmp_path / "copy", """
        from transformer_course.run.loop import kept, train
        from transformer_course.schedules import lr
        try:
            train()
        except NotImplementedError as error:
            print("withheld:", error)
        print(kept(), lr())
        """)
    assert "withheld: the course's finished `train` is not available while notebook 02_second" in printed, printed
    assert "kept finished" in printed, printed


def test_the_registry_matches_the_notebooks_and_the_package():
    """NOTEBOOKS lists each notebook's answer cells; FINISHED names each exercise's pieces, all in the package."""
    notebooks, finished = registry().notebooks, registry().finished
    assert set(finished) == {e for exercises in notebooks.values() for e in exercises}
    for assignment, exercises in notebooks.items():
        solution = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
        assert set(answer_ids(solution)) == set(exercises), assignment
    defined = {}
    for exercise, pieces in finished.items():
        for module, name in map(piece_path, pieces):
            if module not in defined:
                tree = ast.parse((package_folder() / module_file(module)).read_text(encoding="utf-8"))
                defined[module] = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            assert name in defined[module], f"{exercise}: {module}.{name} is no function or class of the package"


def _bodies(node):
    """The statements of each function of ``node`` (a function, or a class's methods), docstrings left out."""
    functions = [node] if isinstance(node, ast.FunctionDef) else [n for n in node.body if isinstance(n, ast.FunctionDef)]
    return [f.body[1:] if ast.get_docstring(f, clean=False) is not None else f.body for f in functions]


@pytest.mark.parametrize("assignment", list(registry().notebooks))
def test_every_finished_exercise_of_the_notebook_and_the_later_ones_is_withheld(assignment):
    """Nothing kept: each exercise of the notebook and of the later ones has its answer withheld, and its helpers
    too unless an earlier notebook's finished part needs them; what is withheld only raises NotImplementedError."""
    notebooks, finished = registry().notebooks, registry().finished
    order = list(notebooks)
    later = {e for a in order[order.index(assignment):] for e in notebooks[a]}
    needed_earlier = {piece_path(p) for e, pieces in finished.items() if e not in later for p in pieces}
    found = withheld(assignment)
    assert {exercise for exercise, answer in found.values() if answer} == later
    for exercise in later:
        for piece in map(piece_path, finished[exercise]):
            assert piece in found or piece in needed_earlier, f"{'.'.join(piece)} of {exercise} is kept"
    assert not {owner for owner, _ in found.values()} - later, "a finished part of an earlier notebook is withheld"
    by_module = {}
    for (module, name), owner in found.items():
        by_module.setdefault(module, {})[name] = owner
    for module, names in by_module.items():
        text = strip_source((package_folder() / module_file(module)).read_text(encoding="utf-8"), names, assignment, module)
        for node in ast.parse(text).body:
            if getattr(node, "name", None) in names:
                assert all(len(body) == 1 and isinstance(body[0], ast.Raise) for body in _bodies(node)), \
                    f"{module}.{node.name} keeps code in {assignment}'s copy"


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
