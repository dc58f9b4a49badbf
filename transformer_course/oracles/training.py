"""Oracles of notebook 07 (build_vocab, label_smoothing_loss, noam_lr, train_step), shared by its hidden tests.

The expected values come from independent computations: a vocabulary counted with a dict and a stable sort,
PyTorch's F.cross_entropy with label_smoothing in float64, the learning-rate formula's two branches written
out, and a training step made of PyTorch's own calls (F.cross_entropy, clip_grad_norm_, the optimizer and the
scheduler); never the course's solution (transformer_course.data, transformer_course.training). The model a
step trains is the course's finished Transformer, the notebook's.

The checks run in the grader's process, on the data the tests' probes sent from the kernel
(transformer_course/probes/training.py, which also builds the inputs both sides share): the facts of the
student's vocabularies, the losses, gradients and parameters after the student's training steps. The checks of
label_smoothing_loss's values and of noam_lr take the student's function, or its calls replayed
(probing.replayed).

The functions that compute an exercise's answer are helpers of that exercise in own_work's table: during its
tests an answer that calls them is refused.
"""
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import testing
from ..probes import training as probes
from ..probes.training import batch, no_builtin_smoothing, params, tiny_model  # noqa: F401  (shared with the probes)
from ..probing import Raised, returned


def vocab_checked(facts, what):
    """The facts of the student's vocabulary (probes.vocab_facts); errors become messages that say where to look."""
    raised = facts.get("raised")
    if isinstance(raised, Raised) and raised.type_name == "ValueError":
        if "twice" in raised.message:
            raise AssertionError(f"{what} failed: {raised.first_line}. A special token that also occurs in the sentences "
                                 "was added a second time: leave the specials out when you add the frequent tokens")
        raise AssertionError(f"{what} failed with ValueError: {raised.first_line}")
    if isinstance(raised, Raised) and raised.type_name in ("TypeError", "AttributeError", "KeyError"):
        raise AssertionError(f"{what} failed with {raised.type_name}: {raised.first_line}. sentences is an iterable of "
                             "token lists (maybe a generator, which has no len() and can be read once)")
    returned(raised, what)
    for attribute in ("itos", "stoi", "encode", "decode"):
        assert facts["has"][attribute], f"{what} has no `{attribute}`: return Vocab(itos)"
    return facts


def oracle_itos(sentences, min_freq, specials):
    """Counted with a dict; a stable sort by count keeps the alphabetical order of ties."""
    count = {}
    for sentence in sentences:
        for token in sentence:
            count[token] = count.get(token, 0) + 1
    kept = [t for t in sorted(count) if count[t] >= min_freq and t not in specials]
    kept.sort(key=lambda t: count[t], reverse=True)
    return list(specials) + kept


def itos_mistake(itos, sentences, min_freq, specials):
    """A sentence naming the mistake that produces itos, or None."""
    count, first, per_sentence = {}, {}, {}
    for i, sentence in enumerate(sentences):
        for token in sentence:
            count[token] = count.get(token, 0) + 1
            first.setdefault(token, (i, len(first)))
        for token in set(sentence):
            per_sentence[token] = per_sentence.get(token, 0) + 1
    specials = list(specials)

    def order(tokens, key):
        return sorted(tokens, key=key)
    kept = [t for t in count if count[t] >= min_freq and t not in specials]
    candidates = {
        "ties are in the order the tokens first appear (as Counter.most_common gives them): break ties "
        "alphabetically, e.g. sort by (-count, token)": specials + order(kept, lambda t: (-count[t], first[t])),
        "ties are in reverse alphabetical order (sorted(..., reverse=True) reverses the tie-break too): sort by "
        "(-count, token)": specials + order(kept, lambda t: (-count[t], [-ord(c) for c in t])),
        "tokens seen exactly min_freq times are missing: keep a token when count >= min_freq, not > min_freq":
            specials + order([t for t in kept if count[t] > min_freq], lambda t: (-count[t], t)),
        "min_freq is ignored: tokens seen fewer than min_freq times are in the vocabulary":
            specials + order([t for t in count if t not in specials], lambda t: (-count[t], t)),
        "the tokens are sorted by ascending count: the most frequent tokens come first":
            specials + order(kept, lambda t: (count[t], t)),
        "the specials are not at the start: itos begins with the specials, in the order given":
            order(kept, lambda t: (-count[t], t)) + specials,
        "the specials are sorted: keep them in the order given": sorted(specials) + order(kept, lambda t: (-count[t], t)),
        "tokens are counted once per sentence: count every occurrence":
            specials + order([t for t in per_sentence if per_sentence[t] >= min_freq and t not in specials],
                             lambda t: (-per_sentence[t], t)),
    }
    for message, candidate in candidates.items():
        if list(itos) == candidate:
            return message
    if len(set(itos)) < len(itos):
        return ("a token appears twice in itos: a special token that also occurs in the sentences was added "
                "again; leave the specials out when you add the frequent tokens")
    return None


def assert_itos(facts, sentences, min_freq, specials, what):
    expected = oracle_itos(sentences, min_freq, specials)
    itos = returned(facts["itos"], f"{what}.itos")
    if itos != expected:
        mistake = itos_mistake(itos, sentences, min_freq, specials)
        if mistake:
            raise AssertionError(f"{what}.itos is wrong: {mistake}")
        raise AssertionError(f"{what}.itos is wrong: expected {len(expected)} tokens starting {expected[:12]}, "
                             f"got {len(itos)} starting {itos[:12]}")


def ls_call(label_smoothing_loss, logits, target, what, **kwargs):
    """The student's loss (called, or replayed from the probe, which forbade F.cross_entropy's smoothing)."""
    try:
        return label_smoothing_loss(logits, target, **kwargs)
    except (RuntimeError, IndexError) as error:
        raise AssertionError(f"{what} failed with {type(error).__name__}: {error}. Ignored targets (e.g. -100) are "
                             "not valid indices: replace them before indexing, and leave them out of the mean") from None


def smoothed(target, V, s, other=False, no_self=False):
    one_hot = F.one_hot(target.clamp(min=0), V).double()
    if other:
        return one_hot * (1 - s) + (1 - one_hot) * s / (V - 1)
    if no_self:
        return one_hot * (1 - s) + (1 - one_hot) * s / V
    return one_hot * (1 - s) + s / V


ONLY_NLL = ("only the first term, (1 - smoothing) * -log p_y, is computed: add the second, smoothing times the mean "
            "over the vocabulary of -log p_j")


def mistakes_for(logits, target, s, ignore_index):
    """What common mistakes give (float64)."""
    x = logits.detach().double()
    V = x.size(-1)
    keep = target != ignore_index
    logp = x.log_softmax(-1)
    def mean_kept(per_position):
        return per_position[keep].mean()
    q = smoothed(target, V, s)
    per = -(q * logp).sum(-1)
    return {
        "the smoothing is spread as smoothing / (V - 1) over the other tokens; here every token gets smoothing / V "
        "(the target one too): q = (1 - smoothing) * one_hot + smoothing / V":
            mean_kept(-(smoothed(target, V, s, other=True) * logp).sum(-1)),
        "the target token does not get its share smoothing / V: q = (1 - smoothing) * one_hot + smoothing / V":
            mean_kept(-(smoothed(target, V, s, no_self=True) * logp).sum(-1)),
        "the logits are used as log-probabilities: apply log_softmax first": mean_kept(-(q * x).sum(-1)),
        "log_softmax runs over the wrong dimension: normalise over the vocabulary, dim=-1":
            mean_kept(-(q * x.log_softmax(0)).sum(-1)),
        "the smoothing is ignored: the loss equals the plain cross-entropy": mean_kept(-logp.gather(-1, target.clamp(min=0)[:, None])[:, 0]),
        ONLY_NLL: mean_kept(-(1 - s) * logp.gather(-1, target.clamp(min=0)[:, None])[:, 0]),
        "the loss is summed instead of averaged over the positions": per[keep].sum(),
        "ignored positions are left out of the sum but still counted: divide by the number of non-ignored positions":
            per[keep].sum() / len(target),
        "ignored positions are not ignored: leave the positions whose target is ignore_index out of the mean":
            per.mean(),
    }


def expected_loss(logits, target, s, ignore_index):
    return F.cross_entropy(logits.detach().double(), target, label_smoothing=s, ignore_index=ignore_index)


def lr_call(noam_lr, step, d_model, warmup_steps, what, **kwargs):
    try:
        value = noam_lr(step, d_model, warmup_steps, **kwargs)
    except NotImplementedError:
        raise
    except (ZeroDivisionError, ValueError):
        raise AssertionError(f"{what} divides by zero: step 0 must count as step 1 (step = max(step, 1))") from None
    if isinstance(value, dict) and set(value) == {"not_a_number"}:   # what probes.as_number sends
        raise AssertionError(f"{what} returned {value['not_a_number']}: return a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AssertionError(f"{what} returned {value!r}: return a number") from None


def expected_lr(step, d_model, warmup_steps, factor=1.0):
    """The two branches written out: linear warm-up, then 1/sqrt(step) decay."""
    step = max(int(step), 1)
    if step < warmup_steps:
        return factor * step / (math.sqrt(d_model) * warmup_steps ** 1.5)
    return factor / math.sqrt(d_model * step)


def lr_mistakes(step, d_model, warmup_steps, factor):
    s = max(step, 1)
    return {
        "min and max are swapped: the rate must be the smaller of step^-0.5 and step * warmup^-1.5":
            factor * d_model ** -0.5 * max(s ** -0.5, s * warmup_steps ** -1.5),
        "the warm-up exponent is wrong: step * warmup_steps ** -1.5": factor * d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -0.5),
        "factor is ignored: multiply by it": d_model ** -0.5 * min(s ** -0.5, s * warmup_steps ** -1.5),
        "the factor d_model^-0.5 is missing": factor * min(s ** -0.5, s * warmup_steps ** -1.5),
        "every step is shifted by one (step + 1): only step 0 counts as step 1":
            factor * d_model ** -0.5 * min((step + 1) ** -0.5, (step + 1) * warmup_steps ** -1.5),
    }


def assert_lr(noam_lr, step, d_model, warmup_steps, factor=1.0):
    what = f"noam_lr({step}, d_model={d_model}, warmup_steps={warmup_steps}, factor={factor})"
    got = lr_call(noam_lr, step, d_model, warmup_steps, what, factor=factor)
    expected = expected_lr(step, d_model, warmup_steps, factor)
    if not math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-12):
        for mistake, value in lr_mistakes(step, d_model, warmup_steps, factor).items():
            if math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-12):
                raise AssertionError(f"{what} is {got:.6g}, expected {expected:.6g}: {mistake}")
        raise AssertionError(f"{what} is {got:.6g}, expected {expected:.6g}")


def step_result(facts, what):
    """The loss the student's train_step returned (probes.stepped); errors become messages that say where to look."""
    loss = facts["loss"]
    if isinstance(loss, Raised) and loss.type_name in ("RuntimeError", "ValueError", "IndexError"):
        raise AssertionError(
            f"{what} failed with {loss.type_name}: {loss.first_line}. The decoder reads tgt[:, :-1] and its logits "
            "[B, T-1, V] are compared with tgt[:, 1:]; flatten both before the loss")
    return returned(loss, what)


def reference_loss(model, src, tgt, pad_idx, smoothing):
    logits = model(src, tgt[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1),
                           label_smoothing=smoothing, ignore_index=pad_idx)


def reference_step(model, src, tgt, optimizer, scheduler, pad_idx, smoothing, clip):
    loss = reference_loss(model, src, tgt, pad_idx, smoothing)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad()
    return loss.item()


def loss_mistakes(model, src, tgt, pad_idx, smoothing):
    with torch.no_grad():
        full = model(src, tgt)
        V = full.size(-1)
        shifted = model(src, tgt[:, :-1])
        return {
            "the labels are not shifted (the decoder reads tgt and is compared with tgt): read tgt[:, :-1], compare with tgt[:, 1:]":
                F.cross_entropy(full.reshape(-1, V), tgt.reshape(-1), label_smoothing=smoothing, ignore_index=pad_idx),
            "the labels are tgt[:, :-1], the decoder's own input: compare with the next tokens, tgt[:, 1:]":
                F.cross_entropy(shifted.reshape(-1, V), tgt[:, :-1].reshape(-1), label_smoothing=smoothing, ignore_index=pad_idx),
            "padding is not ignored: pass ignore_index=pad_idx to the loss":
                F.cross_entropy(shifted.reshape(-1, V), tgt[:, 1:].reshape(-1), label_smoothing=smoothing),
            "the padding id is hard-coded as 0: pass ignore_index=pad_idx":
                F.cross_entropy(shifted.reshape(-1, V), tgt[:, 1:].reshape(-1), label_smoothing=smoothing, ignore_index=0),
            "the smoothing argument is not passed on to the loss":
                F.cross_entropy(shifted.reshape(-1, V), tgt[:, 1:].reshape(-1), label_smoothing=0.1, ignore_index=pad_idx),
        }


def check_build_vocab_order(found):
    """The hidden tests of `test_build_vocab_order`, on probes.vocab_order_facts."""
    corpora, small = probes.vocab_order_inputs()
    for (sentences, min_freq), facts in zip(corpora, found["random"], strict=True):
        what = f"build_vocab(<{len(sentences)} random sentences>, min_freq={min_freq})"
        assert_itos(vocab_checked(facts, what), sentences, min_freq, probes.SPECIALS, what)
    assert_itos(vocab_checked(found["default"], "build_vocab(sentences)"), small, 2, probes.SPECIALS,
                "build_vocab(sentences) (default min_freq=2)")
    gen_vocab = vocab_checked(found["generator"], "build_vocab(<a generator>)")
    assert_itos(gen_vocab, small, 1, probes.SPECIALS, "build_vocab(<a generator of token lists>, min_freq=1)")
    empty = returned(vocab_checked(found["empty"], "build_vocab([])")["itos"], "build_vocab([]).itos")
    assert empty == list(probes.SPECIALS), f"build_vocab([]).itos should be the four specials alone, got {empty}"


def check_build_vocab_specials(found):
    """The hidden tests of `test_build_vocab_specials`, on probes.vocab_specials_facts."""
    specials, sentences, usual = probes.vocab_specials_inputs()
    what = f"build_vocab(sentences, min_freq=1, specials={specials})"
    vocab = vocab_checked(found["other"], what)
    assert_itos(vocab, sentences, 1, specials, what)
    itos, size = vocab["itos"], returned(vocab["len"], f"len({what})")
    assert size == 8, f"len({what}) is {size}, expected 8"
    stoi = returned(vocab["stoi"], f"{what}.stoi")
    assert [stoi[t] for t in itos] == list(range(size)), f"{what}: stoi does not invert itos"
    encoded = returned(vocab["encode"][0], f"{what}.encode(['y', 'w', '<mask>'])")
    assert encoded == [5, 2, 4], \
        f"{what}.encode(['y', 'w', '<mask>']) gave {encoded}, expected [5, 2, 4] (unknown -> <unk>, id 2)"
    decoded = returned(vocab["decode"][0], f"{what}.decode([5, 6, 0])")
    assert decoded == ["y", "x", "<s>"], f"{what}.decode([5, 6, 0]) gave {decoded}"
    what = "build_vocab(sentences in which every special occurs)"
    assert_itos(vocab_checked(found["usual"], what), usual, 2, probes.SPECIALS, what)


def check_label_smoothing_loss_values(label_smoothing_loss):
    """The hidden tests of `test_label_smoothing_loss_values` (the answer, or its calls replayed)."""
    *sized, default, large = probes.smoothing_value_cases()
    for logits, target, kwargs in sized:
        (N, V), s = logits.shape, kwargs["smoothing"]
        what = f"label_smoothing_loss(logits [{N}, {V}], target [{N}], smoothing={s})"
        got = ls_call(label_smoothing_loss, logits, target, what, **kwargs)
        testing.check_tensor(got, what, shape=[])
        testing.assert_close(got, expected_loss(logits, target, s, -100), what, atol=1e-5, rtol=1e-5,
                             mistakes=mistakes_for(logits, target, s, -100) if s > 0 else None)
    logits, target, _ = default
    testing.assert_close(ls_call(label_smoothing_loss, logits, target, "label_smoothing_loss(logits, target)"),
                         expected_loss(logits, target, 0.1, -100),
                         "label_smoothing_loss(logits, target) with the default smoothing (0.1)", atol=1e-5)
    logits, target, _ = large
    got = ls_call(label_smoothing_loss, logits, target, "label_smoothing_loss(logits of size +-90)")
    testing.assert_close(got, expected_loss(logits, target, 0.1, -100), "label_smoothing_loss(logits of size +-90)",
                         atol=1e-3, rtol=1e-5, mistakes={
        "log(softmax(...)) gives -inf for tiny probabilities: use log_softmax": torch.tensor(float("inf"))})


def check_label_smoothing_loss_ignore(label_smoothing_loss):
    """The hidden tests of `test_label_smoothing_loss_ignore` (the answer, or its calls replayed)."""
    for logits, target, kwargs in probes.smoothing_ignore_cases():
        (N, V), s, ignore_index = logits.shape, kwargs["smoothing"], kwargs["ignore_index"]
        what = (f"label_smoothing_loss(logits [{N}, {V}], target with {int((target == ignore_index).sum())} of {N} "
                f"ignored, smoothing={s}, ignore_index={ignore_index})")
        got = ls_call(label_smoothing_loss, logits, target, what, **kwargs)
        testing.check_tensor(got, what, shape=[])
        testing.assert_close(got, expected_loss(logits, target, s, ignore_index), what, atol=1e-5, rtol=1e-5,
                             mistakes=mistakes_for(logits, target, s, ignore_index))


def check_label_smoothing_loss_gradient(found):
    """The hidden tests of `test_label_smoothing_loss_gradient`, on probes.loss_gradients."""
    for (x, target, kwargs), facts in zip(probes.smoothing_gradient_cases(), found, strict=True):
        (N, V), s, ignore_index = x.shape, kwargs["smoothing"], kwargs["ignore_index"]
        what = f"label_smoothing_loss(float64 logits [{N}, {V}], smoothing={s}, ignore_index={ignore_index})"
        loss = facts["loss"]
        if isinstance(loss, Raised) and loss.type_name in ("RuntimeError", "IndexError"):
            raise AssertionError(f"{what} failed with {loss.type_name}: {loss.first_line}. Ignored targets (e.g. -100) "
                                 "are not valid indices: replace them before indexing, and leave them out of the mean")
        testing.check_tensor(returned(loss, what), what, shape=[], dtype=torch.float64)
        returned(facts["backward"], f"backward() through {what}")
        theirs = x.clone().requires_grad_(True)
        F.cross_entropy(theirs, target, label_smoothing=s, ignore_index=ignore_index).backward()
        nll_only = x.clone().requires_grad_(True)
        ((1 - s) * F.cross_entropy(nll_only, target, ignore_index=ignore_index)).backward()
        testing.assert_close(facts["grad"], theirs.grad, f"the gradient of {what} with respect to the logits",
                             atol=1e-8, rtol=1e-6, mistakes={ONLY_NLL: nll_only.grad})


def check_noam_lr_values(noam_lr):
    """The hidden tests of `test_noam_lr_values` (the answer, or its calls replayed)."""
    for step, d_model, warmup_steps, factor in probes.noam_value_points():
        assert_lr(noam_lr, step, d_model, warmup_steps, factor)


def check_noam_lr_step0(noam_lr):
    """The hidden tests of `test_noam_lr_step0` (the answer, or its calls replayed)."""
    for step, d_model, warmup_steps, factor in probes.NOAM_STEP0_POINTS:
        assert_lr(noam_lr, step, d_model, warmup_steps, factor)
    d_model, warmup_steps, steps = probes.NOAM_SCHEDULER
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps))
    for step in range(steps - 1):
        expected = expected_lr(step, d_model, warmup_steps)
        assert math.isclose(optimizer.param_groups[0]["lr"], expected, rel_tol=1e-6), \
            f"with LambdaLR the rate at step {step} is {optimizer.param_groups[0]['lr']:.6g}, expected {expected:.6g}"
        optimizer.step()
        scheduler.step()


def check_train_step_loss(found):
    """The hidden tests of `test_train_step_loss`, on probes.train_step_loss_facts."""
    for (pad_idx, smoothing, seed), facts in zip(probes.TRAIN_LOSS_CASES, found["cases"], strict=True):
        model = tiny_model(pad_idx, seed)
        src, tgt = batch(pad_idx, seed + 10)
        what = f"train_step(model, src, tgt, optimizer, pad_idx={pad_idx}, smoothing={smoothing})"
        expected = reference_loss(copy.deepcopy(model), src, tgt, pad_idx, smoothing)
        mistakes = loss_mistakes(copy.deepcopy(model), src, tgt, pad_idx, smoothing)
        got = step_result(facts, what)
        assert isinstance(got, float), f"{what} returned a {type(got).__name__}: return loss.item(), a Python float"
        testing.assert_close(torch.tensor(got), expected, f"the loss returned by {what}", atol=1e-5, rtol=1e-5,
                             mistakes={k: v for k, v in mistakes.items()
                                       if not torch.allclose(v.double(), expected.double(), atol=1e-5)})
    model = tiny_model(0, 4)
    src, tgt = batch(0, 14)
    expected = reference_loss(copy.deepcopy(model), src, tgt, 0, 0.1)
    got = step_result(found["default"], "train_step(model, src, tgt, optimizer)")
    testing.assert_close(torch.tensor(got), expected, "the loss returned by train_step with the default pad_idx and "
                         "smoothing", atol=1e-5)


def check_train_step_update(found):
    """The hidden tests of `test_train_step_update`, on probes.train_step_update_facts."""
    for (pad_idx, seed, make), steps in zip(probes.update_cases(), found, strict=True):
        ref = tiny_model(pad_idx, seed)
        ref_optimizer, before = make(ref.parameters()), params(ref)
        for number, ((src, tgt), facts) in enumerate(zip(probes.update_batches(pad_idx, seed), steps, strict=True), 1):
            what = (f"after {number} call{'s' if number > 1 else ''} of train_step(model, src, tgt, SGD, "
                    f"pad_idx={pad_idx}, clip=100)")
            step_result(facts, what)
            reference_step(ref, src, tgt, ref_optimizer, None, pad_idx, 0.1, 100.0)
            got, expected = facts["params"], params(ref)
            if torch.allclose(got, before):
                raise AssertionError(f"{what}: no parameter changed. Call optimizer.step() after loss.backward(), and do not "
                                     "zero the gradients between backward() and step()")
            if number == 2 and not torch.allclose(got, expected, atol=1e-5, rtol=1e-4):
                raise AssertionError(f"{what}: the parameters differ from a correct step. Are the gradients cleared in every "
                                     "step (optimizer.zero_grad())? PyTorch adds new gradients to the old ones")
            testing.assert_close(got, expected, f"the parameters {what}", atol=1e-5, rtol=1e-4)
            before = got


def check_train_step_clip(found):
    """The hidden tests of `test_train_step_clip`, on probes.train_step_clip_facts."""
    for (pad_idx, seed, clip), facts in zip(probes.TRAIN_CLIP_CASES, found, strict=True):
        ref = tiny_model(pad_idx, seed)
        unclipped, by_value = copy.deepcopy(ref), copy.deepcopy(ref)
        src, tgt = batch(pad_idx, seed + 40)
        what = f"the parameters after train_step(SGD(lr=1), clip={clip})"
        step_result(facts, what)
        reference_step(ref, src, tgt, torch.optim.SGD(ref.parameters(), lr=1.0), None, pad_idx, 0.1, clip)
        reference_step(unclipped, src, tgt, torch.optim.SGD(unclipped.parameters(), lr=1.0), None, pad_idx, 0.1, 1e9)
        optimizer = torch.optim.SGD(by_value.parameters(), lr=1.0)
        reference_loss(by_value, src, tgt, pad_idx, 0.1).backward()
        nn.utils.clip_grad_value_(by_value.parameters(), clip)
        optimizer.step()
        mistakes = {"the gradients are not clipped (or clipped before backward() / after step()): call "
                    "clip_grad_norm_(model.parameters(), clip) between loss.backward() and optimizer.step()": params(unclipped),
                    "each value was clipped to [-clip, clip] (clip_grad_value_): clip the norm of all gradients together "
                    "with clip_grad_norm_": params(by_value)}
        testing.assert_close(facts["params"], params(ref), what, atol=1e-6, rtol=1e-4,
                             mistakes={k: v for k, v in mistakes.items() if not torch.allclose(v, params(ref), atol=1e-6)})


def check_train_step_scheduler(found):
    """The hidden tests of `test_train_step_scheduler`, on probes.train_step_scheduler_facts."""
    for (pad_idx, seed), facts in zip(probes.TRAIN_SCHEDULER_CASES, found, strict=True):
        ref = tiny_model(pad_idx, seed)
        early = copy.deepcopy(ref)
        ref_optimizer = torch.optim.SGD(ref.parameters(), lr=0.5)
        ref_scheduler = torch.optim.lr_scheduler.LambdaLR(ref_optimizer, probes.schedule)
        src, tgt = batch(pad_idx, seed + 50)
        what = f"the parameters after train_step(SGD, LambdaLR, pad_idx={pad_idx})"
        step_result(facts, what)
        reference_step(ref, src, tgt, ref_optimizer, ref_scheduler, pad_idx, 0.1, 1.0)
        # the mistake: the scheduler stepped before the optimizer, so the update used the next step's rate
        early_optimizer = torch.optim.SGD(early.parameters(), lr=0.5 * probes.schedule(1))
        reference_step(early, src, tgt, early_optimizer, None, pad_idx, 0.1, 1.0)
        testing.assert_close(facts["params"], params(ref), what, atol=1e-6, rtol=1e-4, mistakes={
            "the update used the learning rate of the next step: call scheduler.step() after optimizer.step()": params(early)})
        assert facts["last_epoch"] == 1, f"after one train_step the scheduler made {facts['last_epoch']} steps, expected 1"
        assert math.isclose(facts["lr"], 0.5 * probes.schedule(1)), \
            "after one train_step the optimizer should have the rate of step 1: call scheduler.step() once per step"


ANSWER_HELPERS = {"build_vocab": (oracle_itos, itos_mistake),
                  "label_smoothing_loss": (smoothed, mistakes_for, expected_loss),
                  "noam_lr": (expected_lr, lr_mistakes),
                  "train_step": (reference_loss, reference_step, loss_mistakes)}
