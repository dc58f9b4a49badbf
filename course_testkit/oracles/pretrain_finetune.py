"""Oracles of notebook 10 (pack_sequences, document_mask, sft_example, sft_loss, LoRALinear, add_lora).

The expected values come from computations that share no code with the course's solution
(transformer_course.finetune): the packed blocks by walking the stream token by token; the document mask by
brute force over every query and key (the document of a token found by scanning back for an <eos>); the
fine-tuning example by placing each token by hand; the loss as -log_softmax in float64, position by position,
and its gradient as (softmax - one_hot) / n; LoRA's output, gradients and merged weight as float64 formulas;
add_lora's effect by putting the test double in the projections of the same GPT, a step of SGD by hand.

The checks run in the grader's process on what the probes (course_testkit/probes/pretrain_finetune.py) sent from the
kernel, and rebuild every input from the same seeds. Where the answer is wrong, the message names the mistake
when one of the known ones explains the numbers.
"""
import math

import torch
import torch.nn.functional as F

from ..probes import pretrain_finetune as probes
from ..probing import outcome
from ..testing import assert_close, check_tensor


def _d(t):
    return t.detach().to(torch.float64)


def _as_list(value):
    return value.tolist() if isinstance(value, torch.Tensor) else value


# ----------------------------------------------------------------------------- pack_sequences

def packed(documents, block_size, eos_id, variant=None):
    """The blocks, by walking the stream; a variant is a known mistake."""
    stream = []
    for i, document in enumerate(documents):
        if variant == "eos before":
            stream.append(eos_id)
        stream.extend(document)
        if variant in (None, "padded tail") or (variant == "eos between" and i < len(documents) - 1):
            stream.append(eos_id)
    blocks, current = [], []
    for token in stream:
        current.append(token)
        if len(current) == block_size:
            blocks.append(current)
            current = []
    if variant == "padded tail" and current:
        blocks.append(current + [eos_id] * (block_size - len(current)))
    return blocks


PACK_MISTAKES = {
    "eos before": "<eos> is put before each document instead of after it: the stream is d0 <eos> d1 <eos> ..., so that "
                  "the model learns to end a document and to start the next one after <eos>",
    "eos between": "there is no <eos> after the last document: every document is followed by <eos>, the last one too",
    "no eos": "there is no <eos> between the documents: append eos_id after every document",
    "padded tail": "the last, incomplete block is padded: drop it (len(stream) // block_size blocks), packing "
                   "never pads",
}


def check_pack(found, cases):
    for (documents, block_size, eos_id), result in zip(cases, found["values"]):
        what = f"pack_sequences({documents}, block_size={block_size}, eos_id={eos_id})"
        blocks = outcome(result, what)
        check_tensor(blocks, what)
        assert not blocks.is_floating_point(), f"{what} has dtype {blocks.dtype}: token ids are integers (torch.long)"
        expected = packed(documents, block_size, eos_id)
        got = blocks.tolist()
        if got == expected:
            continue
        for variant, message in PACK_MISTAKES.items():
            if got == packed(documents, block_size, eos_id, variant):
                raise AssertionError(f"{what} = {got}: {message}")
        raise AssertionError(f"{what} = {got}, expected {expected} (shape [{len(expected)}, {block_size}]): the stream "
                             "d0 <eos> d1 <eos> ... cut into consecutive blocks of block_size tokens")
    for size, result in zip((0, -3), found["errors"]):
        from ..probing import assert_raised_value_error
        assert_raised_value_error(result, f"pack_sequences(documents, block_size={size}, eos_id)",
                                  "block_size must be at least 1")


# ----------------------------------------------------------------------------- document_mask

def document_of(row, t, eos_id):
    """The document of position t: how many <eos> come before it (an <eos> belongs to the document it ends)."""
    return sum(1 for s in range(t) if row[s] == eos_id)


def brute_mask(block, eos_id, variant=None):
    """bool [B, T, T] by brute force; a variant is a known mistake."""
    rows = block.tolist()
    batch, length = len(rows), len(rows[0])
    out = torch.zeros(batch, length, length, dtype=torch.bool)
    for b in range(batch):
        row = rows[0] if variant == "first row" else rows[b]
        doc = [document_of(row, t, eos_id) + (variant == "eos starts" and row[t] == eos_id) for t in range(length)]
        for i in range(length):
            for j in range(length):
                causal = j <= i or variant == "not causal"
                same = doc[i] == doc[j] or variant == "causal only"
                out[b, i, j] = causal and same
    return out


MASK_MISTAKES = {
    "eos starts": "an <eos> is put in the document after it: it ends its document, so it belongs to the one before "
                  "(count the <eos> strictly before each position)",
    "not causal": "the mask is not causal: a token may see the later tokens of its document; & it with the causal mask",
    "causal only": "the documents are not kept apart: a token sees the documents before its own; a key counts only "
                   "when it is in the query's document",
    "first row": "every row of the batch gets the mask of the first row: each row has its own documents",
}


def check_document_mask(found, cases):
    for (block, eos_id), result in zip(cases, found):
        what = f"document_mask(block={block.tolist()}, eos_id={eos_id})"
        mask = outcome(result, what)
        check_tensor(mask, what)
        batch, length = block.shape
        shape = list(mask.shape)
        assert shape == [batch, 1, length, length], (
            f"{what} has shape {shape}, expected [{batch}, 1, {length}, {length}]: batch, 1 (broadcast over the heads), "
            "queries, keys")
        assert mask.dtype == torch.bool, f"{what} has dtype {mask.dtype}, expected torch.bool (True: may attend)"
        got, expected = mask[:, 0], brute_mask(block, eos_id)
        if torch.equal(got, expected):
            continue
        if torch.equal(got, ~expected):
            raise AssertionError(f"{what}: the polarity is inverted; True means may attend")
        for variant, message in MASK_MISTAKES.items():
            if torch.equal(got, brute_mask(block, eos_id, variant)):
                raise AssertionError(f"{what}: {message}")
        b, i, j = (got != expected).nonzero()[0].tolist()
        raise AssertionError(f"{what}: row {b}, query {i}, key {j} is {bool(got[b, i, j])}, expected "
                             f"{bool(expected[b, i, j])} (query and key {'in the same' if expected[b, i, j] or j > i else 'in different'} "
                             "documents)")


# ----------------------------------------------------------------------------- sft_example

def sft_expected(prompt, answer, eos_id, variant=None):
    """(inputs, targets, loss_mask) as lists, each token placed by hand; a variant is a known mistake."""
    prompt, answer = [int(t) for t in _as_list(prompt)], [int(t) for t in _as_list(answer)]
    sequence = prompt + answer + ([] if variant == "no eos" else [eos_id])
    inputs, targets = sequence[:-1], sequence[1:]
    first = len(prompt) - 1                       # targets[first] is the answer's first token
    counted = {None: lambda t: t >= first, "no eos": lambda t: t >= first, "mask on inputs": lambda t: t >= first + 1,
               "prompt counted": lambda t: True, "eos not counted": lambda t: first <= t < len(targets) - 1}[variant]
    return inputs, targets, [counted(t) for t in range(len(targets))]


SFT_MISTAKES = {
    "mask on inputs": "the loss mask misses the answer's first token: it is predicted at the prompt's LAST position "
                      "(targets[len(prompt) - 1]); the mask marks the targets that are answer tokens, not the inputs",
    "prompt counted": "the prompt's tokens are counted: the loss is on the answer (and <eos>) only",
    "eos not counted": "the final <eos> is not counted: the model must learn to stop, so its <eos> is a target too",
    "no eos": "there is no <eos> after the answer: the sequence is prompt + answer + [eos_id]",
}


def check_sft_example(found, cases):
    for (prompt, answer, eos_id), result in zip(cases, found["values"]):
        what = f"sft_example({_as_list(prompt)}, {_as_list(answer)}, eos_id={eos_id})"
        result = outcome(result, what)
        assert isinstance(result, (tuple, list)) and len(result) == 3, (
            f"{what} should return three tensors (inputs, targets, loss_mask), got {type(result).__name__}")
        for name, value in zip(("inputs", "targets", "loss_mask"), result):
            check_tensor(value, f"{what}'s {name}")
        got = tuple([bool(v) for v in t.tolist()] if i == 2 else t.tolist() for i, t in enumerate(result))
        assert result[2].dtype == torch.bool, f"{what}'s loss_mask has dtype {result[2].dtype}, expected torch.bool"
        expected = sft_expected(prompt, answer, eos_id)
        if got == expected:
            continue
        if got[0] == got[1] and got[0]:
            raise AssertionError(f"{what}: inputs and targets are the same tokens: targets[t] is the token AFTER "
                                 "inputs[t] (inputs = sequence[:-1], targets = sequence[1:])")
        for variant, message in SFT_MISTAKES.items():
            if got == sft_expected(prompt, answer, eos_id, variant):
                raise AssertionError(f"{what} = {got}: {message}")
        raise AssertionError(f"{what} = {got}, expected {expected} (inputs, targets, loss_mask)")
    from ..probing import assert_raised_value_error
    assert_raised_value_error(found["empty_prompt"], "sft_example([], [5, 6], 2)",
                              "the prompt must hold at least one token: nothing predicts the first")


# ----------------------------------------------------------------------------- sft_loss

def expected_sft_loss(logits, targets, mask, variant=None):
    """The loss in float64, position by position; a variant is a known mistake."""
    log_probs = F.log_softmax(_d(logits), dim=-1)
    if variant == "shifted":
        log_probs, targets, mask = log_probs[:, :-1], targets[:, 1:], mask[:, 1:]
    nll = -log_probs.gather(-1, targets[..., None])[..., 0]
    if variant == "all positions":
        return nll.mean()
    if variant == "zeros averaged":
        return (nll * mask).sum() / nll.numel()
    if variant == "sum":
        return (nll * mask).sum()
    if variant == "row means":
        rows = [nll[b][mask[b]].mean() for b in range(len(nll)) if mask[b].any()]
        return torch.stack(rows).mean()
    return nll[mask].sum() / mask.sum()


SFT_LOSS_MISTAKES = {
    "all positions": "every position is averaged: only the positions loss_mask marks count (the answer's)",
    "zeros averaged": "the unmarked positions are zeroed but still counted in the mean: divide by the number of "
                      "marked positions, loss_mask.sum()",
    "row means": "it is a mean of per-sequence means: one mean over every marked token of the batch, so that a "
                 "long answer counts for more than a short one",
    "sum": "it is a sum, not a mean over the marked tokens",
    "shifted": "the logits and targets are shifted once more: sft_example already paired inputs[t] with the next "
               "token targets[t], so logits[:, t] is scored against targets[:, t]",
}


def expected_grad(logits, targets, mask):
    """d loss / d logits: (softmax - one_hot) / n at the marked positions, 0 elsewhere."""
    probs = F.softmax(_d(logits), dim=-1)
    one_hot = F.one_hot(targets, logits.size(-1)).to(torch.float64)
    return (probs - one_hot) * mask[..., None] / mask.sum()


def check_sft_loss(found, cases):
    for (logits, targets, mask), run in zip(cases, found):
        what = f"sft_loss(logits of shape {list(logits.shape)}, targets, loss_mask)"
        loss = outcome(run["loss"], what)
        check_tensor(loss, what)
        assert loss.numel() == 1, f"{what} has shape {list(loss.shape)}: a loss is one number (a 0-d tensor)"
        expected = expected_sft_loss(logits, targets, mask)
        got = float(loss.detach())
        if abs(got - float(expected)) > 1e-4 * max(1.0, abs(float(expected))):
            for variant, message in SFT_LOSS_MISTAKES.items():
                if abs(got - float(expected_sft_loss(logits, targets, mask, variant))) < 1e-4:
                    raise AssertionError(f"{what} = {got:.5f}, expected {float(expected):.5f}: {message}")
            raise AssertionError(f"{what} = {got:.5f}, expected {float(expected):.5f}: the mean cross-entropy over the "
                                 "marked positions")
        grad = outcome(run["grad"], f"the gradient of {what}")
        assert_close(grad, expected_grad(logits, targets, mask), f"the gradient of {what} with respect to the logits",
                     atol=1e-5)


# ----------------------------------------------------------------------------- LoRALinear

def lora_expected(tensors, case, scale=None):
    """base(x) + (alpha / r) x Aᵀ Bᵀ in float64 (another scale: a known mistake)."""
    _, _, r, alpha, _ = case
    scale = alpha / r if scale is None else scale
    x, weight = _d(tensors["x"]), _d(tensors["weight"])
    return x @ weight.T + _d(tensors["bias"]) + scale * (x @ _d(tensors["A"]).T) @ _d(tensors["B"]).T


def scale_mistakes(case):
    _, _, r, alpha, _ = case
    return {"alpha: the update is scaled by alpha instead of alpha / r": alpha,
            "r / alpha: the update is scaled by r / alpha instead of alpha / r": r / alpha,
            "no scale: the update B A is not multiplied by alpha / r": 1.0}


def check_lora_init(found, cases_and_seeds):
    for (case, seed), run in zip(cases_and_seeds, found):
        d_in, d_out, r, alpha, _ = case
        tensors = probes.lora_tensors(case, seed)
        what = f"LoRALinear(nn.Linear({d_in}, {d_out}), r={r}, alpha={alpha:g})"
        run = outcome(run, what)
        _check_lora_parts(run["facts"], what, d_in, d_out, r)
        B, A = run["B"], run["A"]
        assert B is not None and torch.count_nonzero(B) == 0, (
            f"{what}: B must start at zero, so that the wrapped layer starts as the pre-trained one (B A = 0)")
        bound = 1 / math.sqrt(d_in)
        assert A is not None and A.abs().max() <= bound + 1e-6, (
            f"{what}: A should start uniform in ±1/sqrt(in_features) = ±{bound:.4f} (nn.init.kaiming_uniform_(A, "
            f"a=math.sqrt(5))), got values up to {float(A.abs().max()):.4f}")
        assert torch.unique(A).numel() > min(A.numel(), 2) - 1 and A.abs().max() > bound / 10, (
            f"{what}: A must start random (not zero, not constant): with A and B both at zero no gradient reaches "
            "either of them")
        assert_close(outcome(run["output"], f"{what}(x)"), _d(tensors["x"]) @ _d(tensors["weight"]).T + _d(tensors["bias"]),
                     f"{what}(x) at initialisation (B = 0)", atol=1e-5)
        assert run["base_weight"] is not None and torch.equal(run["base_weight"], tensors["weight"]), (
            f"{what}: the base layer's weight changed: keep the pre-trained weight as it is (frozen)")


def _check_lora_parts(facts, what, d_in, d_out, r):
    trainable = {name for name, fact in facts.items() if fact["trainable"]}
    assert "A" in facts and "B" in facts, f"{what} should have parameters A and B, it has {sorted(facts)}"
    assert facts["A"]["shape"] == [r, d_in], f"{what}: A has shape {facts['A']['shape']}, expected [r, in_features] = {[r, d_in]}"
    assert facts["B"]["shape"] == [d_out, r], (
        f"{what}: B has shape {facts['B']['shape']}, expected [out_features, r] = {[d_out, r]}")
    frozen_base = {name for name in trainable if name.startswith("base.")}
    assert not frozen_base, f"{what}: the base layer's {sorted(frozen_base)} are trainable: freeze them (requires_grad_(False))"
    assert trainable == {"A", "B"}, f"{what}: the trainable parameters are {sorted(trainable)}, expected A and B only"


def check_lora_forward(found, cases_and_seeds):
    for (case, seed), run in zip(cases_and_seeds, found):
        d_in, d_out, r, alpha, _ = case
        tensors = probes.lora_tensors(case, seed)
        what = f"LoRALinear(nn.Linear({d_in}, {d_out}), r={r}, alpha={alpha:g}) with chosen A and B"
        run = outcome(run, what)
        mistakes = {name: lora_expected(tensors, case, scale) for name, scale in scale_mistakes(case).items()}
        assert_close(run["output"], lora_expected(tensors, case), f"{what}, its output", atol=1e-4, mistakes=mistakes)
        expected = _lora_grads(tensors, case)
        for name in ("A", "B"):
            grad = run["grads"][name]
            assert grad is not None, f"{what}: no gradient reached {name}: it must be a trainable nn.Parameter used in forward"
            assert_close(grad, expected[name], f"{what}: the gradient of sum(w * output) for {name}", atol=1e-4)
        assert_close(run["x_grad"], expected["x"], f"{what}: the gradient for the input x", atol=1e-4)
        assert not any(run["base_grads"]), f"{what}: a gradient reached the frozen base layer: freeze its parameters"


def _lora_grads(tensors, case):
    """Gradients of sum(w * y) for y = x Wᵀ + b + s x Aᵀ Bᵀ: dA = s Bᵀ wᵀ x, dB = s wᵀ (x Aᵀ), dx = w (W + s B A)."""
    _, _, r, alpha, _ = case
    s = alpha / r
    x, w = _d(tensors["x"]).flatten(0, 1), _d(tensors["w"]).flatten(0, 1)
    A, B, W = _d(tensors["A"]), _d(tensors["B"]), _d(tensors["weight"])
    return {"A": s * B.T @ w.T @ x, "B": s * w.T @ (x @ A.T), "x": (w @ (W + s * B @ A)).view_as(_d(tensors["x"]))}


def check_lora_merge(found, cases_and_seeds):
    for (case, seed), run in zip(cases_and_seeds, found):
        d_in, d_out, r, alpha, _ = case
        tensors = probes.lora_tensors(case, seed)
        what = f"LoRALinear(nn.Linear({d_in}, {d_out}), r={r}, alpha={alpha:g}) with chosen A and B, merged()"
        run = outcome(run, what)
        assert run["is_linear"], f"{what} returned a {run['type']}, expected one nn.Linear"
        s = alpha / r
        weight = _d(tensors["weight"]) + s * _d(tensors["B"]) @ _d(tensors["A"])
        mistakes = {"the merged weight B A is not scaled by alpha / r": _d(tensors["weight"]) + _d(tensors["B"]) @ _d(tensors["A"]),
                    "the base weight is left out of the merged weight: W + (alpha / r) B A": s * _d(tensors["B"]) @ _d(tensors["A"])}
        check_tensor(run["weight"], f"{what}.weight")
        assert_close(run["weight"], weight, f"{what}.weight", atol=1e-4, mistakes=mistakes)
        assert_close(run["bias"], _d(tensors["bias"]), f"{what}.bias (the base layer's)", atol=1e-6)
        expected = lora_expected(tensors, case)
        assert_close(outcome(run["output"], f"{what}(x)"), expected, f"{what}(x)", atol=1e-4)
        before, after = outcome(run["before"], "the layer's output"), outcome(run["after"], "the layer's output")
        assert_close(before, expected, "the layer's output before merged()", atol=1e-4)
        assert_close(after, expected, "the layer's output after merged()", atol=1e-4, mistakes={
            "merged() changed the layer itself (its base weight): build a new nn.Linear and leave the layer as it was":
            expected + s * (_d(tensors["x"]) @ _d(tensors["A"]).T) @ _d(tensors["B"]).T})


# ----------------------------------------------------------------------------- add_lora

def wrapped_model(case, seed, targets=probes.PROJECTIONS):
    """The test's GPT with the test double around the chosen projections of every attention layer, the rest
    frozen: what add_lora with the double must make."""
    model, tokens, w = probes.add_lora_inputs(case, seed)
    _, r, alpha, _ = case
    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.blocks:
        for name in targets:
            setattr(block.attn, name, probes.LoRADouble(getattr(block.attn, name), r, alpha))
    return model, tokens, w


def add_lora_expected(case, seed, targets=probes.PROJECTIONS):
    """(trainable names, logits, logits after one SGD step of lr 0.5 on sum(w * logits)), by hand."""
    model, tokens, w = wrapped_model(case, seed, targets)
    logits = model(tokens)
    (logits * w).sum().backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p -= 0.5 * p.grad
    trainable = {f"blocks.{i}.attn.{name}.delta" for i in range(len(model.blocks)) for name in targets}
    return trainable, logits.detach(), model(tokens).detach()


def check_add_lora(found, tag=None):
    from ..probing import secret_seed
    for i, (case, run) in enumerate(zip(probes.add_lora_cases(tag), found)):
        seed = secret_seed(f"{tag}-{i}") % 2**31 if tag is not None else 7 + i
        (vocab, d_model, n_heads, n_layers, d_ff), r, alpha, _ = case
        what = f"add_lora(GPT({vocab}, {d_model}, {n_heads}, {n_layers}, {d_ff}), r={r}, alpha={alpha:g})"
        run = outcome(run, what)
        assert run["same_model"], f"{what} should return the model it changed (in place), got something else"
        trainable, logits, after = add_lora_expected(case, seed)
        got = set(run["trainable"])
        _explain_trainable(got, trainable, what)
        assert_close(run["logits"], logits, f"{what}: the logits with the wrapped projections", atol=1e-4, mistakes={
            "w_q and w_v only are wrapped: wrap all four projections, w_q, w_k, w_v and w_o":
            add_lora_expected(case, seed, ("w_q", "w_v"))[1]})
        assert_close(run["after_step"], after, f"{what}: the logits after one SGD step on the trainable parameters",
                     atol=1e-4)


def _explain_trainable(got, expected, what):
    if got == expected:
        return
    if not got:
        raise AssertionError(f"{what}: no parameter is trainable: freeze the model BEFORE wrapping its projections, "
                             "so that the new LoRA parameters stay trainable")
    extra = sorted(got - expected)
    if any(not name.endswith(".delta") for name in extra):
        raise AssertionError(f"{what}: parameters of the pre-trained model stay trainable ({extra[:3]}...): freeze every "
                             "parameter of the model first (requires_grad_(False))")
    if extra:
        raise AssertionError(f"{what}: layers other than the attention projections were wrapped ({extra[:3]}...): "
                             "wrap w_q, w_k, w_v and w_o of the attention layers only")
    missing = sorted(expected - got)
    raise AssertionError(f"{what}: these projections were not wrapped: {missing[:4]}: wrap w_q, w_k, w_v and w_o of "
                         "every attention layer (every block)")

