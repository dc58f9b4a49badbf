"""Notebook 07: what the tests' probes run in the kernel, and the inputs they share with the judges.

Nothing here knows an expected value. The inputs (sentences, logits, learning-rate points, seeded models and
batches) are built by the same code in the kernel and in the grader; the probes call the student's answer on
them and hand back plain data: a vocabulary's itos, stoi, length, encodings and decodings (a Vocab object
cannot travel), the losses and parameters after a training step, or what each call raised. The judges
(transformer_course.oracles.training) rebuild the inputs and compute what is expected themselves.
"""
import random

import torch

from ..probing import Raised, attempt
from ..testing import forbidden, same_random_numbers, substituted

SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
NO_BUILTIN = ("label_smoothing_loss calls F.cross_entropy(..., label_smoothing=...) (or nn.CrossEntropyLoss with "
              "label_smoothing): the exercise is to write it yourself, from log_softmax")


# ----------------------------------------------------------------------------- build_vocab

def vocab_facts(build_vocab, sentences, encode=(), decode=(), **kwargs):
    """``build_vocab(sentences, **kwargs)`` as data: what it raised, or which of itos, stoi, encode, decode it
    has, its itos, its stoi of each token of itos, its len, and its encodings of the token lists ``encode`` and
    decodings (as lists) of the id lists ``decode``; each of them a ``Raised`` where reading it raised."""
    vocab = attempt(build_vocab, sentences, **kwargs)
    if isinstance(vocab, Raised):
        return {"raised": vocab}
    facts = {"has": {name: hasattr(vocab, name) for name in ("itos", "stoi", "encode", "decode")},
             "itos": attempt(lambda: list(vocab.itos))}
    tokens = facts["itos"] if isinstance(facts["itos"], list) else []
    facts["stoi"] = {str(token): attempt(lambda token=token: vocab.stoi[token]) for token in tokens}
    facts["len"] = attempt(len, vocab)
    facts["encode"] = [attempt(vocab.encode, list(tokens)) for tokens in encode]
    facts["decode"] = [attempt(lambda ids=ids: list(vocab.decode(ids))) for ids in decode]
    return facts


def vocab_order_inputs():
    """The hidden order tests' sentences: six random corpora with their min_freq, then a small one."""
    rng = random.Random(7)
    words = [f"{a}{b}" for a in "zyxwvu" for b in "mlkji"]      # 30 words, listed in reverse alphabetical order
    rng.shuffle(words)
    corpora = []
    for trial in range(6):
        sentences = []
        for _ in range(rng.randint(5, 40)):
            sentences.append([rng.choice(words[: 5 + trial * 4]) for _ in range(rng.randint(0, 9))])
        corpora.append((sentences, [1, 2, 3, 2, 5, 2][trial]))
    return corpora, [["b", "a", "b"], ["a", "c"], ["d"]]


def vocab_order_facts(build_vocab):
    """build_vocab on the hidden order tests' inputs: each random corpus, the small one with the default
    min_freq, the small one as a generator (read once), and no sentences at all."""
    corpora, small = vocab_order_inputs()
    return {"random": [vocab_facts(build_vocab, sentences, min_freq=min_freq) for sentences, min_freq in corpora],
            "default": vocab_facts(build_vocab, small),
            "generator": vocab_facts(build_vocab, (s for s in small), min_freq=1),
            "empty": vocab_facts(build_vocab, [])}


def vocab_specials_inputs():
    """The hidden specials tests' inputs: other specials (some in the sentences), then every usual special."""
    specials = ("<s>", "</s>", "<unk>", "<pad>", "<mask>")
    return (specials, [["x", "</s>", "y", "<mask>"], ["y", "</s>", "x", "z"], ["</s>", "y"]],
            [["<pad>", "<eos>", "w"], ["<bos>", "<unk>", "w", "<eos>"]] * 2)


def vocab_specials_facts(build_vocab):
    specials, other, usual = vocab_specials_inputs()
    return {"other": vocab_facts(build_vocab, other, encode=[["y", "w", "<mask>"]], decode=[[5, 6, 0]],
                                 min_freq=1, specials=specials),
            "usual": vocab_facts(build_vocab, usual)}


# ----------------------------------------------------------------------------- label_smoothing_loss

def _uses_builtin(*args, **kwargs):
    return bool(kwargs.get("label_smoothing", args[7] if len(args) > 7 else 0.0))


def no_builtin_smoothing(namespace):
    """Within the block, F.cross_entropy(..., label_smoothing=...) fails the test: the exercise is to write it."""
    return forbidden(namespace, torch.nn.functional, "cross_entropy", NO_BUILTIN, when=_uses_builtin)


def smoothing_value_cases():
    """(logits, target, keyword arguments) of the hidden value tests: sizes, smoothings, the default
    smoothing, and logits of size +-90."""
    generator = torch.Generator().manual_seed(3)
    cases = []
    for N, V, s, scale in [(7, 5, 0.1, 1.0), (12, 37, 0.25, 3.0), (1, 3, 0.1, 1.0), (30, 1000, 0.1, 5.0),
                           (5, 11, 0.0, 2.0), (9, 6, 0.5, 1.0), (4, 4, 1.0, 1.0)]:
        logits = torch.randn(N, V, generator=generator) * scale
        cases.append((logits, torch.randint(0, V, (N,), generator=generator), {"smoothing": s}))
    cases.append((torch.randn(6, 9, generator=generator), torch.randint(0, 9, (6,), generator=generator), {}))
    cases.append((torch.tensor([[80.0, -80.0, 0.0], [-90.0, 90.0, 10.0]]), torch.tensor([1, 0]), {}))
    return cases


def smoothing_ignore_cases():
    """(logits, target, keyword arguments) of the hidden ignore tests: some targets are ignore_index."""
    generator = torch.Generator().manual_seed(5)
    cases = []
    for N, V, s, ignore_index in [(10, 7, 0.1, 0), (16, 13, 0.2, 3), (8, 5, 0.1, -100), (20, 50, 0.1, -1), (6, 4, 0.0, 2)]:
        logits = torch.randn(N, V, generator=generator) * 2
        target = torch.randint(0, V, (N,), generator=generator)
        target[torch.rand(N, generator=generator) < 0.4] = ignore_index
        target[0] = (ignore_index + 1) % V            # at least one position counts
        cases.append((logits, target, {"smoothing": s, "ignore_index": ignore_index}))
    return cases


def smoothing_gradient_cases():
    """(float64 logits, target, keyword arguments) of the hidden gradient tests."""
    generator = torch.Generator().manual_seed(9)
    cases = []
    for N, V, s, ignore_index in [(6, 8, 0.1, 0), (11, 20, 0.3, -100)]:
        x = torch.randn(N, V, generator=generator, dtype=torch.float64)
        target = torch.randint(1, V, (N,), generator=generator)
        target[::3] = ignore_index
        cases.append((x, target, {"smoothing": s, "ignore_index": ignore_index}))
    return cases


def loss_calls(cases):
    """The calls of label_smoothing_loss the judges replay: (args, kwargs) of each case."""
    return [((logits, target), kwargs) for logits, target, kwargs in cases]


def loss_gradients(label_smoothing_loss, cases):
    """For each case: the loss on logits that require a gradient, what backward() did, and the gradient."""
    found = []
    for x, target, kwargs in cases:
        ours = x.clone().requires_grad_(True)
        loss = attempt(label_smoothing_loss, ours, target, **kwargs)
        backward = attempt(loss.backward) if isinstance(loss, torch.Tensor) else None
        found.append({"loss": loss, "backward": backward, "grad": ours.grad})
    return found


# ----------------------------------------------------------------------------- noam_lr

def noam_value_points():
    """(step, d_model, warmup_steps, factor) of the hidden value tests: around the warm-up and far after."""
    points = []
    for d_model, warmup_steps, factor in [(512, 4000, 1.0), (128, 400, 2.0), (1024, 100, 0.5), (64, 1, 1.0),
                                          (256, 3000, 1.0)]:
        for step in [1, 2, 7, warmup_steps - 1, warmup_steps, warmup_steps + 1, 3 * warmup_steps + 5, 100000]:
            if step >= 1:
                points.append((step, d_model, warmup_steps, factor))
    return points + [(50, 512, 4000, 1.0)]


NOAM_STEP0_POINTS = [(0, 128, 400, 2.0), (0, 64, 1, 1.0)]
NOAM_SCHEDULER = (64, 10, 4)   # LambdaLR(lambda step: noam_lr(step, 64, 10)) is asked steps 0 to 3


def as_number(noam_lr):
    """noam_lr whose result travels as a float, or as {"not_a_number": its repr} if float() refuses it."""
    def number(*args, **kwargs):
        value = noam_lr(*args, **kwargs)
        try:
            return float(value)
        except (TypeError, ValueError):
            return {"not_a_number": repr(value)[:200]}
    return number


def noam_calls(points, scheduler=False):
    """The calls of noam_lr the judges replay: noam_lr(step, d_model, warmup_steps, factor=factor) at each
    point, and with ``scheduler`` those LambdaLR(lambda step: noam_lr(step, 64, 10)) makes."""
    d_model, warmup_steps, steps = NOAM_SCHEDULER
    return ([((step, d_model_, warmup_), {"factor": factor}) for step, d_model_, warmup_, factor in points]
            + [((step, d_model, warmup_steps), {}) for step in range(steps if scheduler else 0)])


# ----------------------------------------------------------------------------- train_step

def tiny_model(pad_idx=0, seed=0, src_vocab=11, tgt_vocab=13):
    """The course's Transformer, small, its weights drawn from ``seed``."""
    from ..model import Transformer

    with same_random_numbers(seed):
        return Transformer(src_vocab, tgt_vocab, d_model=16, n_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                           d_ff=32, dropout=0.0, max_len=64, pad_idx=pad_idx)


def batch(pad_idx=0, seed=1, B=3, S=6, T=7, src_vocab=11, tgt_vocab=13):
    """src [B, S] and tgt [B, T] (<bos>=... anything but pad), padded at the end with pad_idx."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, src_vocab, (B, S), generator=generator)
    tgt = torch.randint(0, tgt_vocab, (B, T), generator=generator)
    src[src == pad_idx] = (pad_idx + 1) % src_vocab
    tgt[tgt == pad_idx] = (pad_idx + 1) % tgt_vocab
    if pad_idx != 0:
        tgt[0, 2] = 0                    # id 0 is an ordinary token here
    for b in range(1, B):
        src[b, S - b:] = pad_idx
        tgt[b, T - 2 * b:] = pad_idx
    return src, tgt


def visible_model_and_batch():
    """The visible tests' model (weights drawn from seed 0) and batch: two sentences, padded with 0."""
    src = torch.tensor([[5, 6, 7, 3], [4, 9, 3, 0]])
    tgt = torch.tensor([[2, 8, 9, 10, 3], [2, 7, 3, 0, 0]])
    return tiny_model(0, 0), src, tgt


def params(model):
    """Every parameter of ``model``, flattened into one vector."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def finished_loss(namespace):
    """The block in which the answer's ``label_smoothing_loss`` is the course's: a mistake there costs points
    in its own exercise only."""
    import transformer_course.training

    return substituted(namespace, label_smoothing_loss=transformer_course.training.label_smoothing_loss)


def step_gradient_norms(train_step, namespace):
    """Two steps on the visible model and batch with SGD(lr=0), so that the parameters never change and both steps
    compute the same gradient, and clip=1e6: what they returned, and the norm of the gradients each
    optimizer.step() received."""
    model, src, tgt = visible_model_and_batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    norms = []

    def record(opt, args, kwargs):
        grads = [p.grad.reshape(-1) for group in opt.param_groups for p in group["params"] if p.grad is not None]
        norms.append(torch.cat(grads).norm().item() if grads else 0.0)
    optimizer.register_step_pre_hook(record)
    with finished_loss(namespace):
        results = [attempt(train_step, model, src, tgt, optimizer, clip=1e6) for _ in range(2)]
    return {"results": results, "norms": norms}


def stepped(train_step, namespace, model, *args, **kwargs):
    """``train_step(model, *args, **kwargs)`` with the course's label_smoothing_loss: the loss it returned (or
    what it raised) and the parameters after it."""
    with finished_loss(namespace):
        loss = attempt(train_step, model, *args, **kwargs)
    if isinstance(loss, float) and type(loss) is not float:   # a float subclass (numpy's) travels as a float
        loss = float(loss)
    return {"loss": loss, "params": params(model)}


TRAIN_LOSS_CASES = [(0, 0.1, 0), (2, 0.2, 1), (0, 0.0, 2), (5, 0.1, 3)]   # (pad_idx, smoothing, seed)
TRAIN_CLIP_CASES = [(0, 5, 0.05), (1, 6, 0.3), (0, 7, 1e6)]               # (pad_idx, seed, clip)
TRAIN_SCHEDULER_CASES = [(0, 8), (2, 9)]                                   # (pad_idx, seed)
SCHEDULE = (1.0, 0.01, 0.5, 0.2)   # LambdaLR's factor at steps 0, 1, 2, then 3 onwards


def update_cases():
    """(pad_idx, seed, the optimizer for some parameters) of the hidden update tests."""
    return [(0, 0, lambda ps: torch.optim.SGD(ps, lr=0.5)),
            (3, 1, lambda ps: torch.optim.SGD(ps, lr=0.3, momentum=0.9))]


def update_batches(pad_idx, seed):
    return [batch(pad_idx, seed + 20), batch(pad_idx, seed + 30, B=2, S=5, T=9)]


def schedule(step):
    return SCHEDULE[min(step, len(SCHEDULE) - 1)]


def train_step_loss_facts(train_step, namespace):
    """The hidden loss tests: one step with SGD(lr=0.01) per case, then one with the default arguments."""
    found = []
    for pad_idx, smoothing, seed in TRAIN_LOSS_CASES:
        model = tiny_model(pad_idx, seed)
        src, tgt = batch(pad_idx, seed + 10)
        found.append(stepped(train_step, namespace, model, src, tgt, torch.optim.SGD(model.parameters(), lr=0.01),
                             pad_idx=pad_idx, smoothing=smoothing))
    model = tiny_model(0, 4)
    src, tgt = batch(0, 14)
    return {"cases": found, "default": stepped(train_step, namespace, model, src, tgt,
                                               torch.optim.SGD(model.parameters(), lr=0.01))}


def train_step_update_facts(train_step, namespace):
    """The hidden update tests: two steps on two batches with the same model and optimizer, per case."""
    found = []
    for pad_idx, seed, make in update_cases():
        model = tiny_model(pad_idx, seed)
        optimizer = make(model.parameters())
        found.append([stepped(train_step, namespace, model, src, tgt, optimizer, pad_idx=pad_idx, clip=100.0)
                      for src, tgt in update_batches(pad_idx, seed)])
    return found


def train_step_clip_facts(train_step, namespace):
    """The hidden clipping tests: one step with SGD(lr=1) and the case's clip."""
    found = []
    for pad_idx, seed, clip in TRAIN_CLIP_CASES:
        model = tiny_model(pad_idx, seed)
        src, tgt = batch(pad_idx, seed + 40)
        found.append(stepped(train_step, namespace, model, src, tgt, torch.optim.SGD(model.parameters(), lr=1.0),
                             pad_idx=pad_idx, clip=clip))
    return found


def train_step_scheduler_facts(train_step, namespace):
    """The hidden scheduler tests: one step with SGD(lr=0.5) and LambdaLR(schedule); the scheduler's count of
    steps and the optimizer's rate after it."""
    found = []
    for pad_idx, seed in TRAIN_SCHEDULER_CASES:
        model = tiny_model(pad_idx, seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        src, tgt = batch(pad_idx, seed + 50)
        facts = stepped(train_step, namespace, model, src, tgt, optimizer, scheduler, pad_idx=pad_idx)
        facts.update(last_epoch=scheduler.last_epoch, lr=optimizer.param_groups[0]["lr"])
        found.append(facts)
    return found
