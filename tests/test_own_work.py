"""The course's finished answers refuse to run in their own exercise's tests (transformer_course.own_work).

Every route of ``grading.finished_answers`` is tried for all 24 exercises, in this process: the answer is
defined as in a notebook cell, its exercise's refusal is put in force as a test cell does, and the answer is
called the way the tests call it. tests/test_autograde.py runs three of the routes through the notebooks.
"""
import inspect
import types

import pytest
import torch
import torch.nn as nn

import transformer_course as course
import transformer_course.oracles as oracles
from grading import finished_answers
from helpers import tiny_model
from transformer_course.own_work import FINISHED, FinishedAnswerUsed, require_own_work


def tiny_gpt():
    torch.manual_seed(0)
    return course.gpt.GPT(11, 8, 2, 1, 16, dropout=0.0).eval()


def train_step_arguments():
    model = tiny_model().eval()
    return model, torch.tensor([[4, 5, 3]]), torch.tensor([[2, 6, 7, 3]]), torch.optim.SGD(model.parameters(), lr=0.1)


def self_attention(module):
    x = torch.randn(1, 3, 8)
    return module(x, x, x)


# exercise -> how its tests use an answer (a function or a class)
CALLS = {
    "positional_encoding": lambda f: f(10, 8),
    "TokenEmbedding": lambda c: c(11, 8)(torch.tensor([[1, 2]])),
    "PositionalEncoding": lambda c: c(8, max_len=20, dropout=0.0)(torch.zeros(1, 3, 8)),
    "scaled_dot_product_attention": lambda f: f(torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 5)),
    "padding_mask": lambda f: f(torch.tensor([[1, 0]]), 0),
    "causal_mask": lambda f: f(3),
    "target_mask": lambda f: f(torch.tensor([[1, 0]]), 0),
    "split_heads": lambda f: f(torch.randn(1, 3, 8), 2),
    "merge_heads": lambda f: f(torch.randn(1, 2, 3, 4)),
    "MultiHeadAttention": lambda c: self_attention(c(8, 2)),
    "LayerNorm": lambda c: c(8)(torch.randn(2, 8)),
    "PositionwiseFeedForward": lambda c: c(8, 16)(torch.randn(2, 8)),
    "EncoderLayer": lambda c: c(8, 2, 16)(torch.randn(1, 3, 8)),
    "DecoderLayer": lambda c: c(8, 2, 16)(torch.randn(1, 3, 8), torch.randn(1, 4, 8)),
    "Encoder": lambda c: c(1, 8, 2, 16)(torch.randn(1, 3, 8)),
    "Decoder": lambda c: c(1, 8, 2, 16)(torch.randn(1, 3, 8), torch.randn(1, 4, 8)),
    "Transformer": lambda c: c(11, 13, d_model=8, n_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                               d_ff=16)(torch.tensor([[1, 2]]), torch.tensor([[2, 3]])),
    "build_vocab": lambda f: f([["a", "b"], ["a"]], min_freq=1),
    "label_smoothing_loss": lambda f: f(torch.randn(3, 5), torch.tensor([1, 2, 3])),
    "noam_lr": lambda f: f(10, 512, 4000),
    "train_step": lambda f: f(*train_step_arguments()),
    "greedy_decode": lambda f: f(tiny_model().eval(), torch.tensor([[4, 5, 3]]), 5, 2, 3),
    "beam_search": lambda f: f(tiny_model().eval(), torch.tensor([[4, 5, 3]]), 2, 5, 2, 3),
    "corpus_bleu": lambda f: f([["a", "b"]], [["a", "b"]]),
    "apply_rope": lambda f: f(torch.randn(1, 2, 3, 4), torch.arange(3)),
    "CausalSelfAttention": lambda c: c(8, 2)(torch.randn(1, 3, 8)),
    "GPT": lambda c: c(11, 8, 2, 1, 16)(torch.tensor([[1, 2]])),
    "lm_loss": lambda f: f(torch.randn(1, 3, 5), torch.tensor([[1, 2, 3]])),
    "adamw_param_groups": lambda f: f(nn.Linear(2, 2), 0.1),
    "warmup_cosine_lr": lambda f: f(5, 1e-3, 10, 100),
    "sample_next": lambda f: f(torch.randn(2, 5), top_k=2),
    "generate": lambda f: f(tiny_gpt(), torch.tensor([[1, 2]]), 2),
}
ORDER = list(CALLS)   # the course's order: an exercise builds only on those before it


def notebook_namespace():
    """What a notebook's set-up cell gives an answer cell."""
    return {"__name__": "__main__", "torch": torch, "nn": nn, "F": torch.nn.functional, "math": __import__("math"),
            "course": course, **{name: getattr(course, name) for name in course.__all__}}


def test_every_exercise_has_a_call_and_its_finished_version_runs():
    assert set(CALLS) == set(FINISHED) == set(course.__all__) - {"Vocab", "save_checkpoint", "load_checkpoint"}
    for exercise, call in CALLS.items():
        call(FINISHED[exercise][0])


@pytest.mark.parametrize("answer", finished_answers(ORDER), ids=lambda a: f"{a.exercise}-{a.why}")
def test_every_route_to_the_finished_answer_fails_its_test(answer):
    namespace = notebook_namespace()
    exec(answer.source, namespace)
    with pytest.raises(FinishedAnswerUsed, match=f"finished `{answer.exercise}`.*write your own"):
        require_own_work(answer.exercise, namespace)
        CALLS[answer.exercise](namespace[answer.exercise])


def is_oracle(helper):
    return helper.__module__.startswith("transformer_course.oracles.")


@pytest.mark.parametrize("exercise", [e for e in ORDER if len(FINISHED[e]) > 1])
def test_the_helpers_that_do_the_finished_answers_work_are_refused_too(exercise):
    require_own_work(exercise, {})
    for helper in FINISHED[exercise][1:]:
        expected = "the tests' own computation of" if is_oracle(helper) else "part of the course's finished"
        with pytest.raises(FinishedAnswerUsed, match=f"{expected} `{exercise}`"):
            helper()   # the gate refuses before the arguments are even looked at


# exercise -> (an answer that has an oracle of the hidden tests compute it, the hidden tests' check of it)
ORACLE_ROUTES = {
    "scaled_dot_product_attention": (
        "from transformer_course.oracles import attention as o\n"
        "def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):\n"
        "    return o._fused(query, key, value, mask), o._fused_weights(query, key, mask)\n",
        lambda answer: oracles.attention.check_attention(answer, "attention", torch.randn(2, 3, 4),
                                                         torch.randn(2, 5, 4), torch.randn(2, 5, 6))),
    "causal_mask": (   # the oracle itself handed in as the answer: the check calls it, not by its name
        "from transformer_course.oracles.masking import _causal_table as causal_mask\n",
        lambda answer: oracles.masking.check_causal_values(answer, 4)),
    "padding_mask": (
        "import functools\nfrom transformer_course.oracles import masking\n"
        "padding_mask = functools.partial(masking._padding_table)\n",
        lambda answer: oracles.masking.check_padding_values(answer, torch.tensor([[3, 0, 4]]), 0)),
    "target_mask": (
        "from transformer_course.oracles import masking\n"
        "def target_mask(tokens, pad_idx):\n    return masking._target_table(tokens, pad_idx)\n",
        lambda answer: oracles.masking.check_target_values(answer, torch.tensor([[3, 0, 4]]), 0)),
    "MultiHeadAttention": (
        "from transformer_course.oracles import multi_head\n"
        "class MultiHeadAttention(nn.Module):\n"
        "    def __init__(self, d_model, n_heads, dropout=0.1):\n"
        "        super().__init__()\n        self.n_heads, self.attn = n_heads, None\n"
        "        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))\n"
        "        self.dropout = nn.Dropout(dropout)\n"
        "    def forward(self, query, key, value, mask=None):\n"
        "        return multi_head._expected(self, self.n_heads, query, key, value, mask, dtype=query.dtype)[0]\n",
        lambda answer: oracles.multi_head.check_values((m := answer(8, 2).eval())(*(x := [torch.randn(2, 3, 8)] * 3)), m,
                                                       2, "MultiHeadAttention(8, 2)", *x)),
    "LayerNorm": (
        "from transformer_course.oracles import layer_norm\n"
        "class LayerNorm(nn.Module):\n"
        "    def __init__(self, d_model, eps=1e-5):\n        super().__init__()\n        self.eps = eps\n"
        "        self.gamma, self.beta = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))\n"
        "    def forward(self, x):\n"
        "        return (layer_norm._standardised(x, self.eps) * self.gamma + self.beta).to(x.dtype)\n",
        lambda answer: oracles.layer_norm.check_values(answer(6)(x := torch.randn(3, 6)), x, 1e-5, "LayerNorm(6)")),
    "PositionwiseFeedForward": (
        "from transformer_course.oracles import layer_norm\n"
        "class PositionwiseFeedForward(nn.Module):\n"
        "    def __init__(self, d_model, d_ff, dropout=0.1):\n        super().__init__()\n"
        "        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)\n"
        "        self.dropout = nn.Dropout(dropout)\n"
        "    def forward(self, x):\n        return layer_norm._network(self, x).to(x.dtype)\n",
        lambda answer: oracles.layer_norm.check_feed_forward_eval(
            (ffn := answer(6, 12).eval())(x := torch.randn(3, 6)), ffn, x, 0.1, 0, "PositionwiseFeedForward(6, 12)")),
}


@pytest.mark.parametrize("exercise", ORACLE_ROUTES)
def test_an_answer_that_has_the_tests_oracle_compute_it_is_refused(exercise):
    source, check = ORACLE_ROUTES[exercise]
    namespace = notebook_namespace()
    exec(source, namespace)
    check(namespace[exercise])   # outside the exercise's tests the oracle answers, and the answer passes
    with pytest.raises(FinishedAnswerUsed, match=f"the tests' own computation of `{exercise}`"):
        require_own_work(exercise, namespace)
        check(namespace[exercise])


def test_the_oracles_checks_pass_an_answer_of_ones_own_in_its_exercise_test():
    namespace = notebook_namespace()
    exec("def causal_mask(size, device=None):\n    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]\n",
         namespace)
    require_own_work("causal_mask", namespace)
    oracles.masking.check_causal_values(namespace["causal_mask"], 5)


@pytest.mark.parametrize("exercise", ORDER)
def test_the_earlier_finished_answers_keep_working_in_an_exercise_test(exercise):
    require_own_work(exercise, {})
    for earlier in ORDER[:ORDER.index(exercise)]:
        CALLS[earlier](FINISHED[earlier][0])


def test_the_refusal_ends_with_the_test():
    def a_test_cell():
        require_own_work("LayerNorm", {})
        with pytest.raises(FinishedAnswerUsed):
            CALLS["LayerNorm"](course.LayerNorm)

    a_test_cell()
    CALLS["LayerNorm"](course.LayerNorm)


def test_correct_answers_of_their_own_pass_the_check():
    namespace = notebook_namespace()
    exec("class LayerNorm(nn.Module):\n    '''Normalise each vector over its features, then scale and shift.'''\n"
         "    def __init__(self, d_model, eps=1e-5):\n        super().__init__()\n"
         "        self.gamma, self.beta = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))\n"
         "        self.eps = eps\n\n    def forward(self, x):\n"
         "        return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta, self.eps)\n"
         "def causal_mask(size, device=None):\n    return torch.ones(size, size, dtype=torch.bool, device=device)"
         ".tril()[None, None]\n", namespace)
    for exercise in ("LayerNorm", "causal_mask"):
        require_own_work(exercise, namespace)
        CALLS[exercise](namespace[exercise])


def test_the_gated_functions_still_show_their_signature_and_source():
    for pieces in FINISHED.values():
        for piece in pieces:
            functions = [piece] if isinstance(piece, types.FunctionType) else [
                v for v in vars(piece).values() if isinstance(v, types.FunctionType)]
            for function in functions:
                assert "*args" not in str(inspect.signature(function)), function
                assert f"def {function.__name__}" in inspect.getsource(function), function
    assert str(inspect.signature(course.noam_lr)) == "(step, d_model, warmup_steps, factor=1.0)"


def test_unknown_exercise_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown exercise 'layer_norm'"):
        require_own_work("layer_norm", {})


def test_an_answer_cannot_end_its_refusal():
    """Calling require_own_work for another exercise, or replacing the module's query, opens no gate."""
    import transformer_course.own_work as own_work

    namespace = notebook_namespace()
    exec("import transformer_course.own_work as w\n"
         "def scaled_dot_product_attention(*args, **kwargs):\n"
         "    w.require_own_work('causal_mask', {})\n"
         "    w._refused = lambda exercises: None\n"
         "    return course.scaled_dot_product_attention(*args, **kwargs)\n", namespace)
    saved = own_work._refused
    try:
        with pytest.raises(FinishedAnswerUsed, match="finished `scaled_dot_product_attention`"):
            require_own_work("scaled_dot_product_attention", namespace)
            CALLS["scaled_dot_product_attention"](namespace["scaled_dot_product_attention"])
    finally:
        own_work._refused = saved


# ----------------------------------------------------------------------------- the hidden tests' oracles

# exercise -> (its oracle module, a hidden test's check, an answer that hands the work to the oracle)
ORACLE_ANSWERS = {
    "EncoderLayer": ("transformer", "check_encoder_layer_post_ln", """
from transformer_course.oracles import transformer as oracle
class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout, self.norm_first = nn.Dropout(dropout), norm_first

    def forward(self, x, src_mask=None):
        attend = lambda y: self.dropout(self.self_attn(y, y, y, src_mask))
        return oracle.compose(x, (attend, lambda y: self.dropout(self.feed_forward(y))), (self.norm1, self.norm2),
                              self.norm_first)
"""),
    "noam_lr": ("training", "check_noam_lr_values", """
from transformer_course.oracles.training import expected_lr
def noam_lr(step, d_model, warmup_steps, factor=1.0):
    return expected_lr(step, d_model, warmup_steps, factor)
"""),
    "corpus_bleu": ("decoding", "check_corpus_bleu_values", """
import transformer_course.oracles.decoding
def corpus_bleu(hypotheses, references, max_n=4):
    return transformer_course.oracles.decoding.sacre(hypotheses, references, max_n)
"""),
}


def _encoder_layer_runs(EncoderLayer):
    """What the hidden probe of test_EncoderLayer_post_ln finds (the kernel's half of check_encoder_layer_post_ln)."""
    from transformer_course.probes.transformer import ENCODER_CASES, layer_runs
    return layer_runs(lambda d, h, f: EncoderLayer(d, h, f, dropout=0.3), "encoder", ENCODER_CASES)


PROBES = {"EncoderLayer": _encoder_layer_runs}


@pytest.mark.parametrize("exercise", ORACLE_ANSWERS)
def test_an_answer_that_calls_the_tests_oracle_passes_only_outside_its_tests(exercise):
    """The answer is right (the check passes it when no refusal is in force), so only the gate can fail it."""
    module, check, source = ORACLE_ANSWERS[exercise]
    namespace = notebook_namespace()
    exec(source, namespace)
    oracle = getattr(__import__(f"transformer_course.oracles.{module}").oracles, module)
    probe = PROBES.get(exercise, lambda answer: answer)   # a judged check takes what the probe found
    getattr(oracle, check)(probe(namespace[exercise]))
    require_own_work(exercise, namespace)
    with pytest.raises(FinishedAnswerUsed, match=f"the tests' own computation of `{exercise}`.*write your own"):
        getattr(oracle, check)(probe(namespace[exercise]))


@pytest.mark.parametrize("exercise", ["EncoderLayer", "DecoderLayer", "Encoder", "Decoder", "Transformer",
                                      "build_vocab", "label_smoothing_loss", "noam_lr", "train_step",
                                      "greedy_decode", "beam_search", "corpus_bleu"])
def test_the_oracles_that_compute_an_answer_of_notebooks_06_to_08_are_refused_in_its_tests(exercise):
    helpers = [h for h in FINISHED[exercise] if h.__module__.startswith("transformer_course.oracles.")]
    assert helpers, f"no oracle of {exercise} is gated"
    require_own_work(exercise, {})
    for helper in helpers:
        with pytest.raises(FinishedAnswerUsed, match=f"the tests' own computation of `{exercise}`"):
            helper()   # the gate refuses before the arguments are even looked at

