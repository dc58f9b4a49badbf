"""Oracles of notebook 07 (build_vocab, label_smoothing_loss, noam_lr, train_step), shared by its hidden tests.

The expected values come from independent computations: a vocabulary counted with a dict and a stable sort,
PyTorch's F.cross_entropy with label_smoothing in float64, the learning-rate formula's two branches written
out, and a training step made of PyTorch's own calls (clip_grad_norm_, the optimizer and the scheduler) with the
loss a correct train_step computes: the tests' stand-in for label_smoothing_loss (probes.loss_double), which the
answer is given under that name, or, where the answer computes the loss itself, F.cross_entropy with
label_smoothing. Never the course's solution (transformer_course.data, transformer_course.training). The model a
step trains is the course's finished Transformer (notebook 06's).

The checks run in the grader's process, on the data the tests' probes sent from the kernel
(course_testkit/probes/training.py, which also builds the inputs both sides share, from the grading run's
secret): the facts of the student's vocabularies, the losses, gradients and parameters after the student's
training steps. The checks of label_smoothing_loss's values and of noam_lr take the student's function, or its
calls replayed (probing.replayed).
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


def true_loss(logits, target, smoothing=0.1, ignore_index=-100):
    """The label-smoothed cross-entropy, PyTorch's: what a train_step that computes its loss itself must compute."""
    return F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)


def step_losses(double):
    """The losses a correct train_step may compute: the tests' stand-in ``double``, which it is given as
    label_smoothing_loss (first: the contract's way), or the label-smoothed cross-entropy computed itself."""
    return (double, true_loss)


def reference_loss(model, src, tgt, pad_idx, smoothing, loss=true_loss):
    logits = model(src, tgt[:, :-1])
    return loss(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), smoothing=smoothing, ignore_index=pad_idx)


def reference_step(model, src, tgt, optimizer, scheduler, pad_idx, smoothing, clip, loss=true_loss):
    loss = reference_loss(model, src, tgt, pad_idx, smoothing, loss)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad()
    return loss.item()


NO_SMOOTHING = ("the loss is the plain cross-entropy, without label smoothing: compute it with "
                "label_smoothing_loss(logits, labels, smoothing=smoothing, ignore_index=pad_idx)")


def loss_mistakes(model, src, tgt, pad_idx, smoothing, loss=true_loss):
    """What a train_step with a known mistake computes as its loss with ``loss`` (floats)."""
    with torch.no_grad():
        full = model(src, tgt)
        V = full.size(-1)
        shifted = model(src, tgt[:, :-1]).reshape(-1, V)
        labels = tgt[:, 1:].reshape(-1)
        return {
            "the labels are not shifted (the decoder reads tgt and is compared with tgt): read tgt[:, :-1], compare with tgt[:, 1:]":
                loss(full.reshape(-1, V), tgt.reshape(-1), smoothing=smoothing, ignore_index=pad_idx).item(),
            "the labels are tgt[:, :-1], the decoder's own input: compare with the next tokens, tgt[:, 1:]":
                loss(shifted, tgt[:, :-1].reshape(-1), smoothing=smoothing, ignore_index=pad_idx).item(),
            "padding is not ignored: pass ignore_index=pad_idx to the loss": loss(shifted, labels, smoothing=smoothing).item(),
            "the padding id is hard-coded as 0: pass ignore_index=pad_idx":
                loss(shifted, labels, smoothing=smoothing, ignore_index=0).item(),
            "the smoothing argument is not passed on to the loss": loss(shifted, labels, smoothing=0.1, ignore_index=pad_idx).item(),
            NO_SMOOTHING: loss(shifted, labels, smoothing=0.0, ignore_index=pad_idx).item(),
        }


def _same_loss(a, b):
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5)


def step_loss_mistake(got, model, src, tgt, pad_idx, smoothing, double):
    """The known mistake that makes a train_step return the loss ``got`` (a float) on this case, or None: each
    mistake computed with the stand-in and with the label-smoothed cross-entropy; never one that a correct step
    computes too."""
    expected = [reference_loss(copy.deepcopy(model), src, tgt, pad_idx, smoothing, loss).item() for loss in step_losses(double)]
    for loss in step_losses(double):
        for mistake, value in loss_mistakes(copy.deepcopy(model), src, tgt, pad_idx, smoothing, loss).items():
            if _same_loss(got, value) and not any(_same_loss(value, e) for e in expected):
                return mistake
    return None


def assert_step_loss(got, model, src, tgt, pad_idx, smoothing, double, what):
    """``got``, the loss a train_step returned for ``model`` (before its step) on the batch, is what the stand-in
    ``double`` gives (the step called label_smoothing_loss, as the contract says) or the label-smoothed
    cross-entropy (it computed the loss itself); else an AssertionError naming the mistake where it is known."""
    expected = [reference_loss(copy.deepcopy(model), src, tgt, pad_idx, smoothing, loss).item() for loss in step_losses(double)]
    if any(_same_loss(got, e) for e in expected):
        return
    mistake = step_loss_mistake(got, model, src, tgt, pad_idx, smoothing, double)
    if mistake:
        raise AssertionError(f"the loss returned by {what} is wrong: it looks like {mistake}")
    raise AssertionError(f"the loss returned by {what} is {got:.6g}, expected {expected[0]:.6g} (the tests give train_step "
                         "a stand-in for label_smoothing_loss)")


def _number(value):
    """The loss a step returned as a float, or None where it is no number."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def loss_used(facts, model, src, tgt, pad_idx, smoothing, double, what):
    """The loss a train_step's step was made with, judged by the loss it returned (``model``: before the step): the
    label-smoothed cross-entropy if it returned that, else the stand-in. For the tests of the parameters after a
    step that matched no correct one: an AssertionError naming the loss's mistake where the loss shows a known one
    (the parameters follow from the loss)."""
    got = _number(facts["loss"])
    if got is not None:
        mistake = step_loss_mistake(got, model, src, tgt, pad_idx, smoothing, double)
        if mistake:
            raise AssertionError(f"{what}: the loss train_step computed is wrong, so its update is too: it looks like {mistake}")
        if _same_loss(got, reference_loss(copy.deepcopy(model), src, tgt, pad_idx, smoothing).item()):
            return true_loss
    return double


def _close(a, b, atol):
    return torch.allclose(a, b, atol=atol, rtol=1e-4)


def check_build_vocab_order(found):
    """The hidden tests of `test_build_vocab_order`, on probes.vocab_order_facts."""
    corpora, default, once = probes.vocab_order_inputs()
    for (sentences, min_freq), facts in zip(corpora, found["random"], strict=True):
        what = f"build_vocab(<{len(sentences)} sentences>, min_freq={min_freq})"
        assert_itos(vocab_checked(facts, what), sentences, min_freq, probes.SPECIALS, what)
    assert_itos(vocab_checked(found["default"], "build_vocab(sentences)"), default, 2, probes.SPECIALS,
                "build_vocab(sentences) (default min_freq=2)")
    gen_vocab = vocab_checked(found["generator"], "build_vocab(<a generator>)")
    if gen_vocab["itos"] == list(probes.SPECIALS):
        raise AssertionError("build_vocab(<a generator of token lists>, min_freq=1).itos holds the specials alone: a "
                             "generator can be read only once, so a second pass over `sentences` finds nothing. Count "
                             "the tokens in one pass (or make a list of the sentences first)")
    assert_itos(gen_vocab, once, 1, probes.SPECIALS, "build_vocab(<a generator of token lists>, min_freq=1)")
    empty = returned(vocab_checked(found["empty"], "build_vocab([])")["itos"], "build_vocab([]).itos")
    assert empty == list(probes.SPECIALS), f"build_vocab([]).itos should be the four specials alone, got {empty}"


def check_build_vocab_specials(found):
    """The hidden tests of `test_build_vocab_specials`, on probes.vocab_specials_facts."""
    specials, sentences, usual = probes.vocab_specials_inputs()
    (to_encode,), (to_decode,) = probes.vocab_specials_calls(specials, sentences)
    what = f"build_vocab(sentences, min_freq=1, specials={specials})"
    vocab = vocab_checked(found["other"], what)
    assert_itos(vocab, sentences, 1, specials, what)
    itos, size = vocab["itos"], returned(vocab["len"], f"len({what})")
    assert size == len(itos), f"len({what}) is {size}, expected {len(itos)}: return Vocab(itos)"
    stoi = {token: returned(i, f"{what}.stoi[{token!r}]") for token, i in vocab["stoi"].items()}
    assert [stoi[t] for t in itos] == list(range(size)), f"{what}: stoi does not invert itos"
    expected = [itos.index(t) if t in itos else itos.index("<unk>") for t in to_encode]
    encoded = returned(vocab["encode"][0], f"{what}.encode({to_encode})")
    assert encoded == expected, (f"{what}.encode({to_encode}) gave {encoded}, expected {expected}: unknown tokens get "
                                 f"the id of <unk> ({itos.index('<unk>')} here), the specials their place in itos")
    decoded = returned(vocab["decode"][0], f"{what}.decode({to_decode})")
    expected = [itos[i] for i in to_decode]
    assert decoded == expected, f"{what}.decode({to_decode}) gave {decoded}, expected {expected}"
    what = "build_vocab(sentences in which every special occurs)"
    vocab = vocab_checked(found["usual"], what)
    assert_itos(vocab, usual, 2, probes.SPECIALS, what)
    encoded = returned(vocab["encode"][0], f"{what}.encode([{probes.UNSEEN!r}, '<eos>'])")
    assert encoded == [1, 3], (f"{what}.encode([{probes.UNSEEN!r}, '<eos>']) gave {encoded}, expected [1, 3]: unknown "
                               "tokens get the id of <unk>")


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


def check_noam_lr_step0(noam_lr, types):
    """The hidden tests of `test_noam_lr_step0` (the answer, or its calls replayed; ``types``: probes.noam_types of
    the same calls)."""
    points = probes.noam_step0_points()
    for step, d_model, warmup_steps, factor in points:
        assert_lr(noam_lr, step, d_model, warmup_steps, factor)
    d_model, warmup_steps, steps = probes.noam_scheduler()
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps))
    for step in range(steps - 1):
        expected = expected_lr(step, d_model, warmup_steps)
        assert math.isclose(optimizer.param_groups[0]["lr"], expected, rel_tol=1e-6), \
            f"with LambdaLR the rate at step {step} is {optimizer.param_groups[0]['lr']:.6g}, expected {expected:.6g}"
        optimizer.step()
        scheduler.step()
    for ((step, d_model, warmup_steps), _), kind in zip(probes.noam_calls(points, scheduler=True), types, strict=True):
        kind = returned(kind, f"noam_lr({step}, {d_model}, {warmup_steps})")
        assert kind["is_float"], (f"noam_lr({step}, {d_model}, {warmup_steps}) returned a {kind['type']}: return a "
                                  "Python float, as the exercise asks (float(...) or .item() turns a one-value tensor "
                                  "into one)")


def check_train_step_loss(found):
    """The hidden tests of `test_train_step_loss`, on probes.train_step_loss_facts."""
    double = probes.hidden_double()
    cases, default_seed = probes.train_loss_cases()
    for (pad_idx, smoothing, seed), facts in zip(cases, found["cases"], strict=True):
        what = f"train_step(model, src, tgt, optimizer, pad_idx={pad_idx}, smoothing={smoothing})"
        got = step_result(facts, what)
        assert isinstance(got, float), f"{what} returned a {type(got).__name__}: return loss.item(), a Python float"
        assert_step_loss(got, tiny_model(pad_idx, seed), *batch(pad_idx, seed + 10), pad_idx, smoothing, double, what)
    what = "train_step(model, src, tgt, optimizer) (the default pad_idx=0 and smoothing=0.1)"
    got = step_result(found["default"], what)
    assert isinstance(got, float), f"{what} returned a {type(got).__name__}: return loss.item(), a Python float"
    assert_step_loss(got, tiny_model(0, default_seed), *batch(0, default_seed + 10), 0, 0.1, double, what)


def _update_runs(pad_idx, seed, make, batches, double):
    """For each loss a correct step may use: the parameters after each of the update test's steps."""
    runs = {}
    for loss in step_losses(double):
        model = tiny_model(pad_idx, seed)
        optimizer = make(model.parameters())
        runs[loss] = []
        for src, tgt in batches:
            reference_step(model, src, tgt, optimizer, None, pad_idx, 0.1, 100.0, loss)
            runs[loss].append(params(model))
    return runs


def check_train_step_update(found):
    """The hidden tests of `test_train_step_update`, on probes.train_step_update_facts."""
    double = probes.hidden_double()
    for (pad_idx, seed, make), steps in zip(probes.update_cases(), found, strict=True):
        batches = probes.update_batches(pad_idx, seed)
        runs = _update_runs(pad_idx, seed, make, batches, double)
        losses, before = list(runs), params(tiny_model(pad_idx, seed))   # the losses the steps so far agree with
        for number, ((src, tgt), facts) in enumerate(zip(batches, steps, strict=True), 1):
            what = (f"after {number} call{'s' if number > 1 else ''} of train_step(model, src, tgt, SGD, "
                    f"pad_idx={pad_idx}, clip=100)")
            step_result(facts, what)
            got = facts["params"]
            if torch.allclose(got, before):
                raise AssertionError(f"{what}: no parameter changed. Call optimizer.step() after loss.backward(), and do not "
                                     "zero the gradients between backward() and step()")
            agree = [loss for loss in losses if _close(got, runs[loss][number - 1], 1e-5)]
            if not agree and number == 1:
                loss = loss_used(facts, tiny_model(pad_idx, seed), src, tgt, pad_idx, 0.1, double, what)
                testing.assert_close(got, runs[loss][0], f"the parameters {what}", atol=1e-5, rtol=1e-4)
                raise AssertionError(f"the parameters {what} differ from a correct step's")
            if not agree:
                raise AssertionError(f"{what}: the parameters differ from a correct step, though they were right after the "
                                     "first. Are the gradients cleared in every step (optimizer.zero_grad())? PyTorch adds "
                                     "new gradients to the old ones")
            losses, before = agree, got


def _clip_runs(pad_idx, seed, src, tgt, clip, loss):
    """The parameters after a step with SGD(lr=1): clipped right, not clipped, and clipped value by value."""
    right, unclipped, by_value = (tiny_model(pad_idx, seed) for _ in range(3))
    reference_step(right, src, tgt, torch.optim.SGD(right.parameters(), lr=1.0), None, pad_idx, 0.1, clip, loss)
    reference_step(unclipped, src, tgt, torch.optim.SGD(unclipped.parameters(), lr=1.0), None, pad_idx, 0.1, 1e9, loss)
    optimizer = torch.optim.SGD(by_value.parameters(), lr=1.0)
    reference_loss(by_value, src, tgt, pad_idx, 0.1, loss).backward()
    nn.utils.clip_grad_value_(by_value.parameters(), clip)
    optimizer.step()
    return params(right), {
        "the gradients are not clipped (or clipped before backward() / after step()): call "
        "clip_grad_norm_(model.parameters(), clip) between loss.backward() and optimizer.step()": params(unclipped),
        "each value was clipped to [-clip, clip] (clip_grad_value_): clip the norm of all gradients together "
        "with clip_grad_norm_": params(by_value)}


def check_train_step_clip(found):
    """The hidden tests of `test_train_step_clip`, on probes.train_step_clip_facts."""
    double = probes.hidden_double()
    for (pad_idx, seed, clip), facts in zip(probes.clip_cases(), found, strict=True):
        src, tgt = batch(pad_idx, seed + 40)
        what = f"the parameters after train_step(SGD(lr=1), clip={clip})"
        step_result(facts, what)
        runs = {loss: _clip_runs(pad_idx, seed, src, tgt, clip, loss) for loss in step_losses(double)}
        if any(_close(facts["params"], expected, 1e-6) for expected, _ in runs.values()):
            continue
        expected, mistakes = runs[loss_used(facts, tiny_model(pad_idx, seed), src, tgt, pad_idx, 0.1, double, what)]
        testing.assert_close(facts["params"], expected, what, atol=1e-6, rtol=1e-4,
                             mistakes={k: v for k, v in mistakes.items() if not _close(v, expected, 1e-6)})


def _scheduler_runs(pad_idx, seed, src, tgt, loss):
    """The parameters after a step with SGD(lr=0.5), LambdaLR(schedule) and clip=1e6: right, and with the scheduler
    stepped before the optimizer (the update then uses the next step's rate)."""
    right, early = tiny_model(pad_idx, seed), tiny_model(pad_idx, seed)
    optimizer = torch.optim.SGD(right.parameters(), lr=0.5)
    reference_step(right, src, tgt, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, probes.schedule), pad_idx, 0.1,
                   1e6, loss)
    reference_step(early, src, tgt, torch.optim.SGD(early.parameters(), lr=0.5 * probes.schedule(1)), None, pad_idx, 0.1,
                   1e6, loss)
    return params(right), params(early)


def check_train_step_scheduler(found):
    """The hidden tests of `test_train_step_scheduler`, on probes.train_step_scheduler_facts."""
    double = probes.hidden_double()
    for (pad_idx, seed), facts in zip(probes.scheduler_cases(), found, strict=True):
        src, tgt = batch(pad_idx, seed + 50)
        what = f"the parameters after train_step(SGD, LambdaLR, pad_idx={pad_idx}, clip=1e6)"
        step_result(facts, what)
        runs = {loss: _scheduler_runs(pad_idx, seed, src, tgt, loss) for loss in step_losses(double)}
        if not any(_close(facts["params"], expected, 1e-6) for expected, _ in runs.values()):
            expected, early = runs[loss_used(facts, tiny_model(pad_idx, seed), src, tgt, pad_idx, 0.1, double, what)]
            testing.assert_close(facts["params"], expected, what, atol=1e-6, rtol=1e-4, mistakes={
                "the update used the learning rate of the next step: call scheduler.step() after optimizer.step()": early})
        assert facts["last_epoch"] == 1, f"after one train_step the scheduler made {facts['last_epoch']} steps, expected 1"
        assert math.isclose(facts["lr"], 0.5 * probes.schedule(1)), \
            "after one train_step the optimizer should have the rate of step 1: call scheduler.step() once per step"
