"""``python -m autograder similarity``: a scratch course of notebook 05 with thirteen students, honest answers
from tests/submissions, one who pasted the course package's LayerNorm, two who copied each other, one whose
answers read the test's frame and start a thread (red flags), and an untouched release. No kernels: nothing is
executed.
"""
import csv
import inspect
import os
import re
import subprocess
import sys
import textwrap

import nbformat
import pytest
from support.courses import ScratchCourse
from support.notebooks import ROOT, colab, load_suite, with_answers

import transformer_course
from autograder.__main__ import main
from autograder.similarity import oracle_sources, red_flag_counts, similarity_report
from autograder.source.answers import ORACLES, PACKAGE, SOLUTIONS, is_reference
from autograder.source.normalise import normalise
from autograder.source.red_flags import red_flags

ASSIGNMENT = "05_layer_norm_feed_forward"
WRONG, UNUSUAL = load_suite(ASSIGNMENT)

HEIDI = {
    "LayerNorm": '''
class LayerNorm(nn.Module):
    """Layer normalisation, written by Heidi."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.full((d_model,), 1.0))
        self.beta = nn.Parameter(torch.full((d_model,), 0.0))

    def forward(self, x):
        # <script>alert("centre every vector")</script>
        centred = x - x.mean(-1, keepdim=True)
        spread = centred.pow(2).mean(-1, keepdim=True)
        return centred / (spread + self.eps).sqrt() * self.gamma + self.beta
''',
    "PositionwiseFeedForward": '''
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.linear1 = nn.Linear(in_features=d_model, out_features=d_ff)
        self.linear2 = nn.Linear(in_features=d_ff, out_features=d_model)

    def forward(self, x):
        hidden = self.linear1(x).clamp_min(0.0)    # ReLU
        return self.linear2(self.dropout(hidden))
''',
}


# Right answers with red flags: one reads the test's variables from its caller's frame, one starts a thread.
MALLORY = {
    "LayerNorm": '''
import sys


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        self.seen = dict(sys._getframe(1).f_locals)
        var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)
        return self.gamma * (x - mean) * torch.rsqrt(var + self.eps) + self.beta
''',
    "PositionwiseFeedForward": '''
import threading


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.up, self.down, self.drop = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
        threading.Thread(target=lambda: None, daemon=True).start()

    def forward(self, x):
        return self.down(self.drop(torch.relu(self.up(x))))
''',
}
ADDED_CELL = "import sys\nsys.settrace(lambda *args: None)\n"   # a cell mallory adds below the answers


def disguise(source, renames):
    """What a copier does to hide a copy: other names, another docstring and other comments, and
    another layout (spaces around "=", two-space indents, no blank lines)."""
    for old, new in renames.items():
        source = re.sub(rf"\b{old}\b", new, source)
    source = re.sub(r'"""(.|\n)*?"""', '"""My own work."""', source, count=1)
    source = re.sub(r"#.*", "# checked", source)
    source = re.sub(r"(\w)=(\w)", r"\1 = \2", source)
    source = re.sub(r"\n\s*\n", "\n", source)
    return re.sub(r"(?m)^( +)", lambda m: " " * (len(m.group(1)) // 2), source)


IVAN = {exercise: disguise(source, {"x": "inputs", "centred": "c", "spread": "s", "hidden": "h"})
        for exercise, source in HEIDI.items()}
GRACE = disguise(inspect.getsource(transformer_course.LayerNorm), {"x": "features", "d_model": "size"})


def wrong(why):
    return next(a.source for a in WRONG if a.why == why)


def unusual(start):
    return next(a.source for a in UNUSUAL if a.why.startswith(start))


def answers():
    """student -> {exercise: answer}; an exercise left out keeps the release's stub."""
    return {
        "alice": {"LayerNorm": unusual("register_parameter"),
                  "PositionwiseFeedForward": unusual("an nn.Sequential")},
        "bob": {"LayerNorm": unusual("sums divided"), "PositionwiseFeedForward": unusual("F.linear")},
        "carol": {"LayerNorm": unusual("computes in float64"),
                  "PositionwiseFeedForward": wrong("GELU instead of ReLU")},
        "dave": {"LayerNorm": wrong("subtracts the mean from x in place"),
                 "PositionwiseFeedForward": wrong("dropout after linear2")},
        "erin": {"LayerNorm": wrong("unbiased variance (torch.var's default)"),
                 "PositionwiseFeedForward": unusual("dropout before the ReLU")},
        "frank": {"LayerNorm": wrong("forgets beta"), "PositionwiseFeedForward": wrong("no ReLU")},
        "grace": {"LayerNorm": GRACE,
                  "PositionwiseFeedForward": wrong("never applies dropout")},
        "heidi": HEIDI,
        "ivan": IVAN,
        "judy": {},                                                  # the untouched release
        "mallory": MALLORY,
        "ken": {"LayerNorm": "class LayerNorm(nn.Module):\n    def __init__(self, d_model, eps=1e-5):\n"
                             "        super().__init__()\n        self.gamma = nn.Parameter(torch.ones(d_model)\n",
                "PositionwiseFeedForward": None},                    # None: the stub with a comment added
    }


def make_course(root):
    """The course directory: configuration, the release (as nbgrader generate_assignment writes it, the
    same as notebooks/) and the submissions."""
    course = ScratchCourse(root, ASSIGNMENT, released_copy=True)
    release = course.release
    stubs = {c.metadata.nbgrader["grade_id"]: c.source for c in release.cells if "nbgrader" in c.metadata}
    for student, chosen in answers().items():
        chosen = {g: stubs[g].replace("# YOUR CODE HERE", "# YOUR CODE HERE (todo)") if a is None else a
                  for g, a in chosen.items()}
        notebook = with_answers(release, chosen)
        if student == "mallory":
            notebook.cells.append(nbformat.v4.new_code_cell(ADDED_CELL))
        course.submit(student, colab(notebook) if student == "erin" else notebook)
    course.submit("leo", nbformat.read(ROOT / "notebooks" / "03_masking" / "03_masking.ipynb", as_version=4))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The CLI run on the scratch course with every pair listed: (root, stdout, CSV rows, HTML)."""
    root = tmp_path_factory.mktemp("course")
    make_course(root)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "autograder", "similarity", ASSIGNMENT, "--threshold", "0",
                             "--top", "100"],
                            cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"the command failed:\n{result.stdout}\n{result.stderr}"
    with open(root / f"similarity-{ASSIGNMENT}.csv", newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    html = (root / f"similarity-{ASSIGNMENT}.html").read_text(encoding="utf-8")
    return root, result.stdout, rows, html


def pairs(rows, exercise):
    return [r for r in rows if r["exercise"] == exercise]


def test_the_pasted_package_source_ranks_first_against_the_package(report):
    _, _, rows, _ = report
    against_package = [r for r in pairs(rows, "LayerNorm") if r["student_b"] == PACKAGE]
    assert against_package[0]["student_a"] == "grace"
    assert float(against_package[0]["similarity"]) == 1.0
    assert float(against_package[1]["similarity"]) < 0.8


@pytest.mark.parametrize("exercise", ["LayerNorm", "PositionwiseFeedForward"])
def test_the_copiers_rank_above_every_honest_pair(report, exercise):
    _, _, rows, _ = report
    students = [r for r in pairs(rows, exercise) if r["student_b"] != PACKAGE]
    assert {students[0]["student_a"], students[0]["student_b"]} == {"heidi", "ivan"}
    assert float(students[0]["similarity"]) > max(float(r["similarity"]) for r in students[1:])
    assert "normalised" in students[0]["reason"]


def test_unanswered_cells_pair_with_nothing(report):
    _, _, rows, html = report
    named = {r["student_a"] for r in rows} | {r["student_b"] for r in rows}
    assert "judy" not in named
    assert "ken" not in {r["student_a"] for r in pairs(rows, "PositionwiseFeedForward")}   # a comment is no answer
    assert "Left as the release's stub: judy, ken." in html


def test_every_answer_is_compared_even_from_colab_or_with_a_syntax_error(report):
    _, _, rows, _ = report
    students = {"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "mallory"}
    oracles = {f"{ORACLES}: {name}>" for name in oracle_sources(ASSIGNMENT)}
    assert len(oracles) > 5
    for exercise in ("LayerNorm", "PositionwiseFeedForward"):
        named = {r["student_a"] for r in pairs(rows, exercise)} | {r["student_b"] for r in pairs(rows, exercise)}
        assert named == students | {PACKAGE} | oracles | ({"ken"} if exercise == "LayerNorm" else set())
    # eleven students, every pair of them and each with every reference (no solutions: the course has no source/);
    # never two references
    assert len(pairs(rows, "LayerNorm")) == 11 * 10 // 2 + 11 * (1 + len(oracles))
    assert not any(is_reference(r["student_a"]) and is_reference(r["student_b"]) for r in rows)
    assert any("ken: a syntax error" in r["reason"] for r in pairs(rows, "LayerNorm"))


def test_an_unmatched_notebook_is_reported(report):
    _, stdout, rows, html = report
    assert "not compared: leo:" in stdout
    assert "leo" in html.split("<h2>Not compared</h2>")[1].split("<h2>")[0]
    assert "leo" not in {r["student_a"] for r in rows}


def test_the_page_shows_both_answers_escaped(report):
    _, _, _, html = report
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.index("heidi &harr; ivan") < html.index("alice &harr; bob")
    assert "for a person to judge" in html


def test_the_default_threshold_lists_only_the_near_identical(report):
    root, _, _, _ = report
    ranked, problems = similarity_report(root, ASSIGNMENT, top=1, log=lambda line: None)
    layer_norm = {(p.a.owner, p.b.owner) for p in ranked["LayerNorm"]}
    assert {("heidi", "ivan"), ("grace", PACKAGE)} <= layer_norm
    assert ("alice", "bob") not in layer_norm
    assert [p.split(":")[0] for p in problems] == ["leo"]
    page = (root / f"similarity-{ASSIGNMENT}.html").read_text(encoding="utf-8")
    assert page.count("<details open>") == 2                  # --top: one pair per exercise on the page


def test_renaming_reformatting_and_comments_change_nothing():
    shared = frozenset({"torch"})
    one = normalise('def f(a, b=1e-5):\n    """Doc."""\n    total = torch.sum(a) + b  # add\n    return total\n',
                    shared)
    other = normalise("def g(x,\n      y=0.00001):\n    s = (torch.sum(x)\n         + y)\n    return s", shared)
    assert one == other == ([("def", "v1", "(", "v2", ",", "v3", "=", "1e-05", ")", ":"),
                             ("v4", "=", "torch", ".", "sum", "(", "v2", ")", "+", "v3"),
                             ("return", "v4")], True)


def test_a_syntax_error_falls_back_to_tokens():
    lines, parsed = normalise("def f(a, b=1e-5):\n    return torch.sum(a, dim=b\n", frozenset({"torch"}))
    assert not parsed
    assert lines[0] == ("def", "v1", "(", "v2", ",", "v3", "=", "1e-05", ")", ":")
    assert lines[1][:9] == ("return", "torch", ".", "sum", "(", "v2", ",", "dim", "=")


def test_a_course_without_the_release_is_an_error(tmp_path, capsys):
    assert main(["similarity", ASSIGNMENT, "--course", str(tmp_path)]) == 2
    assert "generate_assignment" in capsys.readouterr().err


# ----------------------------------------------------------------------------- red flags

def labels(source):
    return {(flag.line, flag.label) for flag in red_flags(source)}


def line_of(source, text):
    return next(number for number, line in enumerate(source.splitlines(), 1) if text in line)


def test_reading_the_callers_frame_and_starting_a_thread_are_flagged():
    frame, thread = MALLORY["LayerNorm"], MALLORY["PositionwiseFeedForward"]
    at = line_of(frame, "_getframe")
    assert labels(frame) == {(at, "frame: sys._getframe"), (at, "frame: f_locals")}
    assert labels(thread) == {(line_of(thread, "import threading"), "threads: threading"),
                              (line_of(thread, "Thread("), "threads: threading")}
    assert labels("from sys import _getframe as caller\nvalues = caller(2).f_globals") == {
        (1, "frame: sys._getframe"), (2, "frame: sys._getframe"), (2, "frame: f_globals")}
    assert labels("from concurrent.futures import ThreadPoolExecutor as Pool\nPool(2)") == {
        (1, "threads: concurrent.futures"), (2, "threads: concurrent.futures")}
    assert labels("get_ipython().events.register('pre_run_cell', f)\nimport os\nos._exit(0)") == {
        (1, "kernel: get_ipython"), (1, "event callback: events.register"), (3, "exit: os._exit")}
    assert labels("eval(code + '1')\nexec('import sys\\nsys.settrace(None)')") == {
        (1, "dynamic code: eval of a built string"), (2, "trace hook: settrace")}
    assert labels("%time scope = sys._getframe(1)") == {(1, "frame: sys._getframe")}   # IPython magic: tokens


def test_ordinary_answers_have_no_red_flag():
    ordinary = ("class Scale(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.register_buffer('top', torch.tensor(math.inf))\n"
                "    def forward(self, x):\n        self.eval()\n        n = len(list(self.modules()))\n"
                "        pattern = re.compile('a+')\n        return torch.stack([x, x]).clamp(max=self.top) / n\n")
    assert red_flags(ordinary) == []
    answers = [a.source for assignment in sorted(p.stem for p in (ROOT / "tests" / "submissions").glob("0*.py"))
               for suite in load_suite(assignment) for a in suite]
    answers += [inspect.getsource(getattr(transformer_course, name))
                for name in ("LayerNorm", "MultiHeadAttention", "Transformer", "corpus_bleu")]
    answers += HEIDI.values()
    assert len(answers) > 300
    assert [a for a in answers if red_flags(textwrap.dedent(a))] == []


def test_the_pairs_show_their_red_flags(report):
    _, _, rows, html = report
    row = next(r for r in pairs(rows, "LayerNorm") if "mallory" in (r["student_a"], r["student_b"]))
    flags = row["red_flags_a"] if row["student_a"] == "mallory" else row["red_flags_b"]
    at = line_of(MALLORY["LayerNorm"], "_getframe")
    assert flags == f"frame: f_locals (line {at}); frame: sys._getframe (line {at})"   # by line, then label
    others = [r for r in rows if not {"mallory", "grace"} & {r["student_a"], r["student_b"]}]
    assert others and not any(r["red_flags_a"] or r["red_flags_b"] for r in others)
    assert "red flags: frame: f_locals" in html


def test_red_flags_are_listed_even_outside_every_pair(report):
    root, _, _, _ = report
    ranked, _ = similarity_report(root, ASSIGNMENT, log=lambda line: None)
    assert not any("mallory" in (p.a.owner, p.b.owner) for found in ranked.values() for p in found)
    with open(root / f"redflags-{ASSIGNMENT}.csv", newline="", encoding="utf-8") as file:
        flagged = {(r["student"], r["cell"], r["red_flag"]) for r in csv.DictReader(file)}
    added = next(cell for _, cell, _ in flagged if cell.startswith("added cell"))
    assert flagged == {("mallory", "LayerNorm", "frame: sys._getframe"), ("mallory", "LayerNorm", "frame: f_locals"),
                       ("mallory", "PositionwiseFeedForward", "threads: threading"),
                       ("mallory", added, "trace hook: settrace"),
                       ("grace", "LayerNorm", f"a copy of {PACKAGE} (similarity 1.00)")}
    page = (root / f"similarity-{ASSIGNMENT}.html").read_text(encoding="utf-8")
    section = page.split("<h2>Red flags</h2>")[1].split("<h2>")[0]
    assert section.count("<b>mallory</b>") == 3 and "sys.settrace(lambda *args: None)" in section


# ----------------------------------------------------------------------------- copies of the public sources

def test_copies_of_the_solutions_and_of_the_oracles_are_red_flags(tmp_path):
    """In an open course the solutions and the hidden tests' oracles are public: an answer copied from either is
    flagged as such (the same text for an exercise with about one way to write it), and counted per notebook."""
    course = ScratchCourse(tmp_path, ASSIGNMENT)   # from solutions/: the course has source/, as an instructor's does
    solution = {c.metadata.nbgrader["grade_id"]: c.source for c in course.solution.cells
                if c.metadata.get("nbgrader", {}).get("solution")}
    oracle_name, oracle = max(oracle_sources(ASSIGNMENT).items(), key=lambda item: len(item[1]))
    course.submit("copier", with_answers(course.release, solution))
    course.submit("honest", with_answers(course.release, HEIDI))
    course.submit("oracle", with_answers(course.release, {"LayerNorm": HEIDI["LayerNorm"] + "\n\n" + oracle}))
    counts = red_flag_counts(course.root, ASSIGNMENT)
    assert counts["copier", ASSIGNMENT] == 2 and counts["honest", ASSIGNMENT] == 0 and counts["oracle", ASSIGNMENT] == 1
    similarity_report(course.root, ASSIGNMENT, log=lambda line: None)
    with open(course.root / f"redflags-{ASSIGNMENT}.csv", newline="", encoding="utf-8") as file:
        flagged = {(r["student"], r["cell"], r["red_flag"]) for r in csv.DictReader(file)}
    assert ("copier", "LayerNorm", f"a copy of {SOLUTIONS} (the same text)") in flagged
    assert ("copier", "PositionwiseFeedForward", f"a copy of {SOLUTIONS} (the same text)") in flagged
    assert not any(student == "honest" for student, _, _ in flagged)
    assert ("oracle", "LayerNorm", f"a copy of {ORACLES}: {oracle_name}> (the same text)") in flagged
