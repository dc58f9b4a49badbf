"""Answers that are someone else's code (autograder/source/library_answers.py): a library's finished version where
the exercise is to write it, or the course package's finished version. Found in the source, never run: the
unit tests need no kernel; one test grades notebook 05 end to end, one checks a notebook before hand-in."""
import csv
import inspect
import subprocess
import sys
import textwrap

import nbformat
import pytest
from support.courses import ScratchCourse
from support.notebooks import ROOT, SOLUTIONS, answer_ids, grade_cells_of, load_suite, solved, with_answers
from test_similarity import disguise

import transformer_course
from autograder.cells import grade_id, is_test
from autograder.check import check_notebook, render
from autograder.execution.sandbox import Limits, sandbox_available
from autograder.registry import registry
from autograder.source.answers import finished_source
from autograder.source.library_answers import (
    COPY_THRESHOLD,
    ENAME,
    copied_answers,
    flagged_answers,
    library_answers,
    package_pairs,
    refuse_flagged,
)

ASSIGNMENTS = sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir())
RELEASES = {a: nbformat.read(ROOT / "notebooks" / a / f"{a}.ipynb", as_version=4) for a in ASSIGNMENTS}
SOLVED = {a: solved(RELEASES[a], nbformat.read(SOLUTIONS / a / f"{a}.ipynb", as_version=4)) for a in ASSIGNMENTS}
NOTEBOOK_OF = {exercise: a for a, release in RELEASES.items() for exercise in answer_ids(release)}


LN = "class LayerNorm(nn.Module):\n    def __init__(self, d_model, eps=1e-5):\n        super().__init__()\n{body}"
FORWARD = "    def forward(self, x):\n        return {call}\n"
# A LayerNorm that passes every test when it runs: only its source tells that it is not the student's own.
BORROWED_LAYER_NORM = LN.format(body="""        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.size(-1),), weight=self.gamma, bias=self.beta, eps=self.eps)
""")


def flagged(exercise, source):
    """What the grader says of ``source`` as the answer to ``exercise`` in its release notebook."""
    notebook = RELEASES[NOTEBOOK_OF[exercise]]
    return library_answers(with_answers(notebook, {exercise: source}))


# (exercise, answer, what the message must name)
LIBRARY_ANSWERS = [
    ("LayerNorm", LN.format(body=FORWARD.format(call="F.layer_norm(x, x.shape[-1:])")), "calls F.layer_norm,"),
    ("LayerNorm", LN.format(body=FORWARD.format(call="torch.nn.functional.layer_norm(x, x.shape[-1:])")),
     "torch.nn.functional.layer_norm (F.layer_norm)"),
    ("LayerNorm", "from torch.nn.functional import layer_norm as ln\n" + LN.format(body=FORWARD.format(call="ln(x, (4,))")),
     "imports F.layer_norm"),
    ("LayerNorm", "import torch.nn.functional as fn\n" + LN.format(body=FORWARD.format(call="fn.layer_norm(x, (4,))")),
     "fn.layer_norm (F.layer_norm)"),
    ("LayerNorm", "functional = torch.nn.functional\n" + LN.format(body=FORWARD.format(call="functional.layer_norm(x, (4,))")),
     "functional.layer_norm (F.layer_norm)"),
    ("LayerNorm", LN.format(body="        self.norm = torch.nn.LayerNorm(d_model, eps)\n"), "torch.nn.LayerNorm (nn.LayerNorm)"),
    ("LayerNorm", "class LayerNorm(nn.LayerNorm):\n    pass\n", "uses nn.LayerNorm"),
    ("LayerNorm", LN.format(body=FORWARD.format(call="torch.layer_norm(x, (4,))")), "calls torch.layer_norm"),
    ("LayerNorm", LN.format(body=FORWARD.format(call='getattr(F, "layer_norm")(x, (4,))')), "(F.layer_norm)"),
    ("LayerNorm", 'LayerNorm = getattr(torch.nn, "Layer" + "Norm")', "(nn.LayerNorm)"),
    ("LayerNorm", LN.format(body=FORWARD.format(call='vars(F)["layer_norm"](x, (4,))')), "(F.layer_norm)"),
    ("LayerNorm", "import importlib\n" + LN.format(body=FORWARD.format(
        call='importlib.import_module("torch.nn.functional").layer_norm(x, (4,))')), "calls F.layer_norm,"),   # too long
    ("LayerNorm", "from torch.nn.functional import *\n" + LN.format(body=FORWARD.format(call="layer_norm(x, (4,))")),
     "calls layer_norm (F.layer_norm)"),
    ("LayerNorm", 'exec("from torch.nn.functional import layer_norm as ln")\n'
     + LN.format(body=FORWARD.format(call="ln(x, (4,))")), "(F.layer_norm)"),
    ("LayerNorm", "%%time\n" + LN.format(body=FORWARD.format(call="F.layer_norm(x, (4,))")), "F.layer_norm"),
    ("scaled_dot_product_attention", "def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):\n"
     "    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask), None", "F.scaled_dot_product_attention"),
    ("scaled_dot_product_attention", "def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):\n"
     "    return torch._scaled_dot_product_attention_math(query, key, value, mask)",
     "torch._scaled_dot_product_attention_math"),
    ("scaled_dot_product_attention", "from torch.nn.functional import scaled_dot_product_attention",
     "imports F.scaled_dot_product_attention"),
    ("MultiHeadAttention", "class MultiHeadAttention(nn.Module):\n    def __init__(self, d_model, n_heads, dropout=0.1):\n"
     "        super().__init__()\n        self.mha = nn.MultiheadAttention(d_model, n_heads, dropout, batch_first=True)",
     "nn.MultiheadAttention"),
    ("MultiHeadAttention", "def forward(q, k, v, *weights):\n    return F.multi_head_attention_forward(q, k, v, *weights)",
     "F.multi_head_attention_forward"),
    ("EncoderLayer", "class EncoderLayer(nn.TransformerEncoderLayer):\n    pass", "nn.TransformerEncoderLayer"),
    ("DecoderLayer", "from torch.nn import TransformerDecoderLayer as DecoderLayer", "nn.TransformerDecoderLayer"),
    ("Encoder", "class Encoder(nn.Module):\n    def __init__(self, n_layers, *args):\n        super().__init__()\n"
     "        self.stack = torch.nn.TransformerEncoder(EncoderLayer(*args), n_layers)", "nn.TransformerEncoder"),
    ("Decoder", "Decoder = lambda n_layers, *args: nn.TransformerDecoder(DecoderLayer(*args), n_layers)",
     "nn.TransformerDecoder"),
    ("Transformer", "class Transformer(nn.Module):\n    def __init__(self, *args, **kwargs):\n        super().__init__()\n"
     "        self.core = nn.Transformer(batch_first=True)", "nn.Transformer"),
    ("corpus_bleu", "import sacrebleu\n\ndef corpus_bleu(hypotheses, references, max_n=4):\n"
     "    return sacrebleu.corpus_bleu([' '.join(h) for h in hypotheses], [[' '.join(r) for r in references]]).score",
     "imports sacrebleu, sacreBLEU"),
    ("corpus_bleu", "def corpus_bleu(hypotheses, references, max_n=4):\n    from sacrebleu.metrics import BLEU\n"
     "    return BLEU(tokenize='none').corpus_score(hypotheses, [references]).score", "sacrebleu.metrics.BLEU"),
    ("corpus_bleu", "from nltk.translate.bleu_score import corpus_bleu as nltk_bleu\n\n"
     "def corpus_bleu(hypotheses, references, max_n=4):\n    return 100 * nltk_bleu([[r] for r in references], hypotheses)",
     "NLTK's finished BLEU"),
    ("corpus_bleu", "from torchmetrics.functional.text import bleu_score", "torchmetrics' finished BLEU"),
    ("corpus_bleu", "import evaluate\nbleu = evaluate.load('bleu')", "calls evaluate.load"),
    ("label_smoothing_loss", "def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):\n"
     "    return F.cross_entropy(logits, target, ignore_index=ignore_index, label_smoothing=smoothing)",
     "calls F.cross_entropy, PyTorch's built-in label smoothing"),
    ("label_smoothing_loss", "def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):\n"
     "    return nn.CrossEntropyLoss(ignore_index=ignore_index, label_smoothing=smoothing)(logits, target)",
     "nn.CrossEntropyLoss"),
    ("label_smoothing_loss", "def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):\n"
     "    return torch.nn.functional.cross_entropy(logits, target, None, None, ignore_index, None, 'mean', smoothing)",
     "(F.cross_entropy)"),
]


@pytest.mark.parametrize("exercise, source, named", LIBRARY_ANSWERS, ids=lambda v: v if len(v) < 30 else "")
def test_a_library_answer_is_flagged_with_what_it_used_and_what_to_write(exercise, source, named):
    message = flagged(exercise, source).get(exercise, "")
    assert named in message, f"{exercise}: {message or 'not flagged'}"
    assert "yourself" in message and "used by the tests" in message, message



# The course package's own finished version of the exercise, however the answer reaches it.
FINISHED = [
    ("split_heads", "from transformer_course import split_heads", "imports transformer_course.split_heads"),
    ("MultiHeadAttention", "class MultiHeadAttention(course.MultiHeadAttention):\n    pass",
     "uses course.MultiHeadAttention"),
    ("scaled_dot_product_attention", "import transformer_course.attention as finished\n"
     "scaled_dot_product_attention = finished.scaled_dot_product_attention", "finished.scaled_dot_product_attention"),
    ("greedy_decode", "def greedy_decode(*args, **kwargs):\n"
     "    return getattr(course.decoding, 'greedy_decode')(*args, **kwargs)", "greedy_decode"),
]


@pytest.mark.parametrize("exercise, source, named", FINISHED, ids=[e for e, _, _ in FINISHED])
def test_the_course_finished_answer_is_flagged(exercise, source, named):
    message = flagged(exercise, source).get(exercise, "")
    assert named in message and f"the course's finished `{exercise}`" in message and "write your own" in message, \
        message or "not flagged"


FINE = [
    ("LayerNorm", '"""Not F.layer_norm: the mean and the variance."""\n' + LN.format(body=FORWARD.format(
        call="(x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)  # F.layer_norm")),
     "the names in a docstring and a comment"),
    ("label_smoothing_loss", "def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):\n"
     "    nll = F.cross_entropy(logits, target, ignore_index=ignore_index)\n"
     "    keep = target != ignore_index\n"
     "    return (1 - smoothing) * nll - smoothing * logits.log_softmax(-1)[keep].mean()",
     "cross-entropy without label_smoothing, smoothed by hand"),
    ("MultiHeadAttention", "class MultiHeadAttention(nn.Module):\n    def forward(self, q, k, v, mask=None):\n"
     "        out, self.attn = scaled_dot_product_attention(q, k, v, mask, self.dropout)\n        return out",
     "the course's scaled_dot_product_attention, imported by the setup cell"),
    ("EncoderLayer", "class EncoderLayer(nn.Module):\n    def __init__(self, d_model, *args):\n        super().__init__()\n"
     "        self.norm1 = nn.LayerNorm(d_model)", "a library call off-limits only in another exercise"),
    ("corpus_bleu", "def corpus_bleu(hypotheses, references, max_n=4):\n    # checked against sacrebleu\n"
     "    return 0.0", "sacrebleu in a comment"),
]


@pytest.mark.parametrize("exercise, source, why", FINE, ids=[why for _, _, why in FINE])
def test_an_answer_of_ones_own_is_not_flagged(exercise, source, why):
    assert flagged(exercise, source) == {}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_solutions_are_not_flagged(assignment):
    assert flagged_answers(SOLVED[assignment], RELEASES[assignment]) == {}


UNUSUAL = [answer for a in ASSIGNMENTS for answer in load_suite(a)[1]]


@pytest.mark.parametrize("answer", UNUSUAL, ids=[f"{a.exercise}: {a.why}" for a in UNUSUAL])
def test_unusual_correct_answers_are_not_flagged(answer):
    assignment = NOTEBOOK_OF[answer.exercise]
    notebook = with_answers(SOLVED[assignment], {answer.exercise: answer.source})
    assert flagged_answers(notebook, RELEASES[assignment]) == {}


def test_the_exercises_left_out_of_the_copy_check_are_those_whose_solution_is_the_finished_code():
    """An exercise with about one way to write it cannot tell a copy from honest work: the course's own
    solution already reaches the threshold. Those, and only those, are left out, by name."""
    reaching = {exercise for a in ASSIGNMENTS for exercise, pair in package_pairs(SOLVED[a], RELEASES[a]).items()
                if pair.score >= COPY_THRESHOLD}
    assert reaching == registry().not_compared


COMPARED = [e for e in NOTEBOOK_OF if e not in registry().not_compared and hasattr(transformer_course, e)]


@pytest.mark.parametrize("exercise", COMPARED)
def test_the_package_answer_pasted_or_disguised_is_flagged(exercise):
    source = inspect.getsource(getattr(transformer_course, exercise))
    renamed = disguise(source, {"x": "inputs", "query": "q_in", "tokens": "ids", "hypotheses": "hyps", "model": "net"})
    release = RELEASES[NOTEBOOK_OF[exercise]]
    for answer in (source, renamed):
        message = copied_answers(with_answers(release, {exercise: answer}), release).get(exercise, "")
        assert f"the course's finished {exercise}" in message and "write your own" in message, message or answer


@pytest.mark.parametrize("name", transformer_course.__all__)
def test_the_finished_source_read_from_the_files_is_what_python_sees(name):
    assert finished_source(name) == textwrap.dedent(inspect.getsource(getattr(transformer_course, name))), \
        f"the package's {name} read from its files differs from inspect.getsource: a definition moved or renamed?"


def test_the_copy_check_does_not_import_torch_into_the_grader():
    """The record step runs it in the grader's own process for every grading run: torch takes seconds."""
    assignment = "05_layer_norm_feed_forward"
    probe = ("import sys, nbformat\n"
             "from autograder.source.library_answers import flagged_answers\n"
             f"solved = nbformat.read({str(SOLUTIONS / assignment / (assignment + '.ipynb'))!r}, as_version=4)\n"
             f"release = nbformat.read({str(ROOT / 'notebooks' / assignment / (assignment + '.ipynb'))!r}, as_version=4)\n"
             "assert flagged_answers(solved, release) == {}\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_course')))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"the copy check imported {run.stdout.strip()}"


def test_the_test_cells_of_a_flagged_exercise_and_only_those_get_the_error():
    assignment = "05_layer_norm_feed_forward"
    notebook = with_answers(SOLVED[assignment], {"LayerNorm": BORROWED_LAYER_NORM})
    assert list(refuse_flagged(notebook, RELEASES[assignment])) == ["LayerNorm"]
    errors = {grade_id(c): [o for o in c.outputs if o.get("ename") == ENAME] for c in notebook.cells if is_test(c)}
    assert all(errors[g] and "F.layer_norm" in errors[g][0].evalue for g in grade_cells_of(notebook, "LayerNorm"))
    assert not any(errors[g] for g in grade_cells_of(notebook, "PositionwiseFeedForward"))


def test_check_warns_before_hand_in_naming_the_exercise_and_the_call():
    assignment = "05_layer_norm_feed_forward"
    notebook = with_answers(SOLVED[assignment], {"LayerNorm": BORROWED_LAYER_NORM})
    report = check_notebook(notebook, RELEASES[assignment], Limits(cell_timeout=60, total_timeout=300))
    text = render(report)
    assert not report.ok and "LayerNorm: this answer calls F.layer_norm" in text, text
    assert [e.name for e in report.exercises if e.not_own] == ["LayerNorm"], text
    assert not any(e.failures for e in report.exercises), text     # its visible tests pass: only the source tells


NEEDS_SANDBOX = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not installed or cannot "
                                   "create namespaces here: apt-get install bubblewrap")


def graded_alone(root, assignment, exercise, answer):
    """``python -m autograder grade`` on a scratch course with one student, who answers ``exercise`` with
    ``answer`` and every other exercise with the solution. Returns (score and max_score per grade id, the test
    cells of ``exercise``, the messages the grader added to them, whether any of them failed when run)."""
    course = ScratchCourse(root, assignment)
    course.submit("student", with_answers(course.release, {**course.solution_answers(), exercise: answer}))
    subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, "--workers", "1"],
                   cwd=root, check=True, capture_output=True, timeout=600)
    rows = {r["cell"]: (float(r["score"]), float(r["max_score"]))
            for r in csv.DictReader(open(root / f"grades-{assignment}-cells.csv")) if r["kind"] == "test"}
    tests = grade_cells_of(course.release, exercise)
    executed = nbformat.read(root / ".autograder" / assignment / "executed" / "student" / assignment
                             / f"{assignment}.ipynb", as_version=4)
    # (the worker adds its refusal, ENAME, to the executed notebook: any other error is the answer's own)
    failed_when_run = any(o.output_type == "error" and o.get("ename") != ENAME
                          for c in executed.cells if grade_id(c) in tests for o in c.outputs)
    graded = nbformat.read(course.path("autograded", "student"), as_version=4)
    messages = [o.evalue for c in graded.cells if grade_id(c) in tests for o in c.outputs if o.get("ename") == ENAME]
    return rows, tests, messages, failed_when_run


@NEEDS_SANDBOX
@pytest.mark.slow
@pytest.mark.xdist_group("grader")
def test_the_grader_scores_a_library_answer_zero_in_its_own_tests_only(tmp_path):
    rows, tests, messages, failed = graded_alone(tmp_path, "05_layer_norm_feed_forward", "LayerNorm", BORROWED_LAYER_NORM)
    assert not failed, "the answer failed its tests when run: the zero must come from the grader's reading of its source"
    assert tests and all(rows[g][0] == 0 for g in tests), rows
    others = [g for g in rows if g not in tests]
    assert others and all(rows[g][0] == rows[g][1] > 0 for g in others), rows     # PositionwiseFeedForward's
    assert len(messages) == len(tests) and "calls F.layer_norm" in messages[0], messages


@NEEDS_SANDBOX
@pytest.mark.slow
@pytest.mark.xdist_group("grader")
def test_the_grader_scores_a_disguised_copy_of_the_package_zero(tmp_path):
    """The grader finds the release in the course directory, for similarity.py to leave the stub out."""
    copy = disguise(inspect.getsource(transformer_course.padding_mask), {"tokens": "ids"})
    rows, tests, messages, failed = graded_alone(tmp_path, "03_masking", "padding_mask", copy)
    assert not failed and tests and all(rows[g][0] == 0 for g in tests), rows
    assert all(score == top for g, (score, top) in rows.items() if g not in tests), rows
    assert len(messages) == len(tests) and "the course's finished padding_mask" in messages[0], messages
