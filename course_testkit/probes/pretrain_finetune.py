"""Probes of notebook 10 (pack_sequences, document_mask, sft_example, sft_loss, LoRALinear, add_lora).

Each ``*_cases(tag)`` builds a test's inputs: fixed, readable ones for the visible tests (tag None), drawn from
``secret_generator(tag)`` for the hidden ones. The probe and the judge (course_testkit/oracles/pretrain_finetune.py)
call the same function, so both see the same inputs; nothing here knows an expected value.
"""
import torch
from torch import nn

from ..probing import Raised, attempt, secret_generator

PROJECTIONS = ("w_q", "w_k", "w_v", "w_o")


def _int(low, high, generator):
    """An int drawn uniformly from [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def _ids_without(n, vocab, excluded, generator):
    """n ids from [0, vocab) none of which is `excluded`."""
    ids = torch.randint(0, vocab - 1, (n,), generator=generator)
    return (ids + (ids >= excluded).long()).tolist()


# ----------------------------------------------------------------------------- pack_sequences

PACK_VISIBLE = [([[5, 6, 7], [8], [9, 10]], 3, 2), ([[5, 6, 7], [8], [9, 10]], 4, 2), ([[4, 4], [3, 1, 5, 9]], 2, 0)]


def pack_cases(tag=None):
    """(documents, block_size, eos_id) cases: documents of 0 to 9 ids that never hold eos_id, an eos id anywhere
    in the vocabulary (never always 0 or the last id), blocks from 1 to 7 tokens."""
    if tag is None:
        return PACK_VISIBLE
    g = secret_generator(tag)
    cases = []
    for _ in range(5):
        vocab = _int(6, 40, g)
        eos = _int(1, vocab - 2, g)
        documents = [_ids_without(_int(0 if i else 1, 9, g), vocab, eos, g) for i in range(_int(3, 8, g))]
        cases.append((documents, _int(2, 7, g), eos))
    # the first case's stream fills its blocks exactly (its last document made longer): its last <eos> is kept
    documents, size, eos = cases[0]
    missing = -sum(len(d) + 1 for d in documents) % size
    documents[-1] = documents[-1] + _ids_without(missing, max(documents[0]) + 2, eos, g)
    return cases


def pack_runs(pack_sequences, cases):
    return {"values": [attempt(pack_sequences, docs, size, eos) for docs, size, eos in cases],
            "errors": [attempt(pack_sequences, cases[0][0], size, cases[0][2]) for size in (0, -3)]}


# ----------------------------------------------------------------------------- document_mask

MASK_VISIBLE = [(torch.tensor([[5, 6, 2, 7, 2, 8]]), 2), (torch.tensor([[5, 6, 2, 7, 2, 8], [2, 9, 9, 9, 2, 3]]), 2)]


def mask_cases(tag=None):
    """(block [B, T], eos_id) cases; hidden: 2 to 4 rows of 4 to 10 tokens, about one in four an <eos>, at
    different places in different rows."""
    if tag is None:
        return MASK_VISIBLE
    g = secret_generator(tag)
    cases = []
    for _ in range(4):
        vocab, batch, length = _int(6, 30, g), _int(2, 4, g), _int(4, 10, g)
        eos = _int(1, vocab - 2, g)
        block = torch.tensor([_ids_without(length, vocab, eos, g) for _ in range(batch)])
        ends = torch.rand(batch, length, generator=g) < 0.25
        ends[0, _int(1, length - 2, g)] = True                        # an <eos> inside the first row, for sure
        cases.append((block.masked_fill(ends, eos), eos))
    return cases


def mask_runs(document_mask, cases):
    return [attempt(document_mask, block, eos) for block, eos in cases]


# ----------------------------------------------------------------------------- sft_example

SFT_VISIBLE = [([4, 5, 6], [7, 8], 2), ([9], [3, 3, 1], 0)]


def sft_cases(tag=None):
    """(prompt_ids, answer_ids, eos_id) cases; hidden: prompts of 1 to 6 ids, answers of 0 to 6, one case with
    tensors instead of lists."""
    if tag is None:
        return SFT_VISIBLE
    g = secret_generator(tag)
    cases = []
    for i in range(5):
        vocab = _int(6, 50, g)
        eos = _int(1, vocab - 2, g)
        prompt = _ids_without(_int(1, 6, g), vocab, eos, g)
        answer = _ids_without(_int(0 if i == 1 else 1, 6, g), vocab, eos, g)
        cases.append((torch.tensor(prompt), torch.tensor(answer), eos) if i == 2 else (prompt, answer, eos))
    return cases


def sft_runs(sft_example, cases):
    return {"values": [attempt(sft_example, prompt, answer, eos) for prompt, answer, eos in cases],
            "empty_prompt": attempt(sft_example, [], [5, 6], 2)}


# ----------------------------------------------------------------------------- sft_loss

def sft_loss_cases(tag=None):
    """(logits [B, L, V], targets [B, L], loss_mask [B, L]) cases: rows with different numbers of counted
    positions (so that a mean of per-row means differs from the mean), a row with none counted."""
    g = secret_generator(tag) if tag is not None else torch.Generator().manual_seed(10)
    shapes = [(2, 5, 7), (3, 6, 4)] if tag is None else [(_int(2, 4, g), _int(4, 8, g), _int(3, 12, g)) for _ in range(3)]
    cases = []
    for batch, length, vocab in shapes:
        logits = 2 * torch.randn(batch, length, vocab, generator=g)
        targets = torch.randint(0, vocab, (batch, length), generator=g)
        starts = torch.randint(0, length - 1, (batch,), generator=g)
        starts[0], starts[-1] = 0, length - 2                          # one row counts everything, one row two
        mask = torch.arange(length)[None, :] >= starts[:, None]
        if batch > 2:
            mask[1] = False                                            # nothing to learn from this row
        cases.append((logits, targets, mask))
    return cases


def sft_loss_runs(sft_loss, cases):
    """Each case's loss and its gradient with respect to the logits."""
    runs = []
    for logits, targets, mask in cases:
        logits = logits.clone().requires_grad_(True)
        loss = attempt(sft_loss, logits, targets, mask)
        if isinstance(loss, torch.Tensor) and loss.requires_grad:
            grad = attempt(lambda: torch.autograd.grad(loss, logits)[0])
        else:
            grad = Raised("AssertionError", "sft_loss returned no tensor with a gradient: keep the computation in torch")
        runs.append({"loss": loss, "grad": grad})
    return runs


# ----------------------------------------------------------------------------- LoRALinear

LORA_VISIBLE = [(6, 5, 2, 4.0, 3)]


def lora_cases(tag=None):
    """(in_features, out_features, r, alpha, batch) cases, and for each a generator's draws (below)."""
    if tag is None:
        return LORA_VISIBLE
    g = secret_generator(tag)
    return [(_int(3, 12, g), _int(2, 9, g), _int(1, 4, g), float(_int(1, 32, g)), _int(1, 4, g)) for _ in range(3)]


def lora_tensors(case, seed):
    """The base layer's weight and bias, the inputs x, chosen A and B, and the weights of the summed output."""
    d_in, d_out, r, _, batch = case
    g = torch.Generator().manual_seed(seed)
    return {"weight": torch.randn(d_out, d_in, generator=g), "bias": torch.randn(d_out, generator=g),
            "x": torch.randn(batch, 2, d_in, generator=g), "A": torch.randn(r, d_in, generator=g),
            "B": torch.randn(d_out, r, generator=g), "w": torch.randn(batch, 2, d_out, generator=g)}


def base_linear(tensors):
    base = nn.Linear(tensors["weight"].size(1), tensors["weight"].size(0))
    with torch.no_grad():
        base.weight.copy_(tensors["weight"])
        base.bias.copy_(tensors["bias"])
    return base


def lora_facts(layer):
    """Names, shapes and trainability of a layer's parameters."""
    return {name: {"shape": list(p.shape), "trainable": bool(p.requires_grad)} for name, p in layer.named_parameters()}


def lora_init_run(LoRALinear, case, tensors):
    """A new layer around the base: its parameters, A and B as it made them, its output on x, the base's weight."""
    d_in, d_out, r, alpha, _ = case
    layer = attempt(LoRALinear, base_linear(tensors), r, alpha)
    if isinstance(layer, Raised):
        return layer
    return {"facts": lora_facts(layer), "A": _parameter(layer, "A"), "B": _parameter(layer, "B"),
            "output": attempt(lambda: layer(tensors["x"])), "base_weight": _parameter(layer.base, "weight")
            if isinstance(getattr(layer, "base", None), nn.Module) else None}


def _parameter(module, name):
    value = getattr(module, name, None)
    return value.detach().clone() if isinstance(value, torch.Tensor) else None


def with_chosen_update(LoRALinear, case, tensors):
    """A layer whose A and B are set to the chosen values (or a Raised)."""
    layer = attempt(LoRALinear, base_linear(tensors), case[2], case[3])
    if isinstance(layer, Raised):
        return layer
    for name in ("A", "B"):
        parameter = getattr(layer, name, None)
        if not isinstance(parameter, torch.Tensor) or list(parameter.shape) != list(tensors[name].shape):
            return Raised("AssertionError", f"LoRALinear has no parameter {name} of shape {list(tensors[name].shape)} "
                                            f"(got {None if parameter is None else list(parameter.shape)})")
        with torch.no_grad():
            parameter.copy_(tensors[name])
    return layer


def lora_forward_run(LoRALinear, case, tensors):
    """With the chosen A and B: the output on x, and the gradients of sum(w * output) for A, B and x."""
    layer = with_chosen_update(LoRALinear, case, tensors)
    if isinstance(layer, Raised):
        return layer
    x = tensors["x"].clone().requires_grad_(True)
    output = attempt(layer, x)
    if isinstance(output, Raised):
        return output
    (output * tensors["w"]).sum().backward()
    grads = {name: None if getattr(layer, name).grad is None else getattr(layer, name).grad.clone() for name in ("A", "B")}
    base_grad = [p.grad is not None for p in layer.base.parameters()] if isinstance(getattr(layer, "base", None),
                                                                                   nn.Module) else []
    return {"output": output.detach(), "grads": grads, "x_grad": x.grad, "base_grads": base_grad}


def lora_merge_run(LoRALinear, case, tensors):
    """With the chosen A and B: merged()'s weight, bias and output, and the layer's output before and after."""
    layer = with_chosen_update(LoRALinear, case, tensors)
    if isinstance(layer, Raised):
        return layer
    merge = getattr(layer, "merged", None) or getattr(layer, "merge", None)
    with torch.no_grad():
        before = attempt(layer, tensors["x"])
        merged = attempt(merge) if merge is not None else Raised("AttributeError", "LoRALinear has no merged()")
        if isinstance(merged, Raised):
            return merged
        return {"type": type(merged).__name__, "is_linear": isinstance(merged, nn.Linear),
                "weight": _parameter(merged, "weight"), "bias": _parameter(merged, "bias"),
                "output": attempt(merged, tensors["x"]), "before": before, "after": attempt(layer, tensors["x"])}


def lora_runs(LoRALinear, kind, tag=None):
    run = {"init": lora_init_run, "forward": lora_forward_run, "merge": lora_merge_run}[kind]
    return [run(LoRALinear, case, lora_tensors(case, seed)) for case, seed in lora_seeds(tag)]


def lora_seeds(tag=None):
    """(case, seed of its tensors) of a test."""
    from ..probing import secret_seed
    return [(case, secret_seed(f"{tag}-{i}") if tag is not None else 100 + i) for i, case in enumerate(lora_cases(tag))]


# ----------------------------------------------------------------------------- add_lora

class LoRADouble(nn.Module):
    """The stand-in for LoRALinear in add_lora's tests (not an answer): base(x) plus a trainable shift `delta`
    [out_features] that starts at a fixed value of (out_features, r, alpha), so that a wrapped projection changes
    the output and a test can see which were wrapped."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        self.delta = nn.Parameter(torch.linspace(-1.0, 1.0, base.out_features) * alpha / (10.0 * r))

    def forward(self, x):
        return self.base(x) + self.delta


ADD_LORA_VISIBLE = [((13, 8, 2, 2, 16), 4, 8.0, 5)]


def add_lora_cases(tag=None):
    """((vocab, d_model, n_heads, n_layers, d_ff), r, alpha, length) cases."""
    if tag is None:
        return ADD_LORA_VISIBLE
    g = secret_generator(tag)
    return [((_int(7, 20, g), 4 * _int(1, 3, g), 2, _int(2, 3, g), _int(8, 20, g)), _int(1, 8, g),
             float(_int(1, 16, g)), _int(3, 7, g)) for _ in range(2)]


def add_lora_inputs(case, seed):
    """A GPT of notebook 09 (the course's) with seeded weights, tokens, and the weights of the summed logits."""
    from transformer_course.gpt import GPT
    from ..testing import same_random_numbers
    (vocab, d_model, n_heads, n_layers, d_ff), _, _, length = case
    with same_random_numbers(seed):
        model = GPT(vocab, d_model, n_heads, n_layers, d_ff, dropout=0.0).eval()
    g = torch.Generator().manual_seed(seed + 1)
    return model, torch.randint(0, vocab, (2, length), generator=g), torch.randn(2, length, vocab, generator=g)


def add_lora_run(add_lora, case, seed):
    """add_lora on the GPT; then its logits, the trainable parameters' names, and the logits after one SGD step
    (lr 0.5) on sum(w * logits) over every parameter left trainable."""
    model, tokens, w = add_lora_inputs(case, seed)
    returned_model = attempt(add_lora, model, case[1], case[2])
    if isinstance(returned_model, Raised):
        return returned_model
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    logits = model(tokens)
    params = [p for p in model.parameters() if p.requires_grad]
    if params:
        torch.optim.SGD(params, lr=0.5).zero_grad()
        (logits * w).sum().backward()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p -= 0.5 * p.grad
    return {"same_model": returned_model is model, "trainable": trainable, "logits": logits.detach(),
            "after_step": model(tokens).detach()}


def add_lora_runs(add_lora, tag=None):
    from ..probing import secret_seed
    return [add_lora_run(add_lora, case, secret_seed(f"{tag}-{i}") % 2**31 if tag is not None else 7 + i)
            for i, case in enumerate(add_lora_cases(tag))]
