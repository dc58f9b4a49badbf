"""Notebook 07: what the tests' probes run in the kernel, and the inputs they share with the judges.

Nothing here knows an expected value. The inputs (sentences, logits, learning-rate points, seeded models and
batches) are built by the same code in the kernel and in the grader; the probes call the student's answer on
them and hand back plain data: a vocabulary's itos, stoi, length, encodings and decodings (a Vocab object
cannot travel), the losses and parameters after a training step, or what each call raised. The judges
(course_testkit.oracles.training) rebuild the inputs and compute what is expected themselves.

The hidden tests' inputs are drawn from ``secret_generator(tag)`` (each function below names its tag), so that
neither a table of results nor a recorded payload can pass them. train_step's tests give the answer a stand-in
for label_smoothing_loss (``loss_double``): a mistake in the student's loss costs points in that exercise only.
"""
import torch

from ..probing import Raised, attempt, secret_generator, secret_seed
from ..testing import forbidden, same_random_numbers, substituted

SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
NO_BUILTIN = ("label_smoothing_loss calls F.cross_entropy(..., label_smoothing=...) (or nn.CrossEntropyLoss with "
              "label_smoothing): the exercise is to write it yourself, from log_softmax")


def _draw(generator, low, high):
    """An int drawn from [low, high] (both included)."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def _uniform(generator, low, high):
    """A float drawn from [low, high), rounded to 3 decimals (readable in a message)."""
    return round(low + (high - low) * float(torch.rand(1, generator=generator)), 3)


def _seed(generator):
    """A seed for a model's or a batch's random numbers."""
    return _draw(generator, 0, 2**31 - 1)


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


def _shuffled(items, generator):
    return [items[i] for i in torch.randperm(len(items), generator=generator).tolist()]


def secret_words(generator, n):
    """``n`` distinct words of 2 to 4 lowercase letters, in a random order."""
    words = set()
    while len(words) < n:
        letters = torch.randint(0, 26, (_draw(generator, 2, 4),), generator=generator).tolist()
        words.add("".join(chr(ord("a") + i) for i in letters))
    return _shuffled(sorted(words), generator)


def _sentences(tokens, generator):
    """``tokens`` shuffled and cut into sentences of 0 to 9 tokens."""
    tokens, sentences = _shuffled(tokens, generator), []
    while tokens:
        length = _draw(generator, 0, 9)
        sentences.append(tokens[:length])
        tokens = tokens[length:]
    return sentences


def secret_corpus(generator, min_freq):
    """Sentences in which every known mistake of build_vocab shows (with min_freq >= 2 for the ones about rare
    tokens): three tokens tied at min_freq + 1 that first appear in reverse alphabetical order (a tie-break by
    first appearance, or a reverse one, is visible), a token seen min_freq + 3 times (ascending counts), one
    seen exactly min_freq times (> instead of >=), one seen once (min_freq ignored), one whose min_freq + 2
    occurrences share a sentence (counted once per sentence), and a few tokens with random counts."""
    tied, top, boundary, rare, repeated, *others = secret_words(generator, 11)
    counts = {top: min_freq + 3, boundary: min_freq, rare: 1, **{w: _draw(generator, 1, min_freq + 4) for w in others}}
    tied = sorted([tied, *others[:2]], reverse=True)
    counts.update({w: min_freq + 1 for w in tied})
    pool = [w for w, n in counts.items() for _ in range(n - (w in tied))]
    sentences = _sentences(pool, generator)
    sentences.insert(_draw(generator, 0, len(sentences)), [repeated] * (min_freq + 2))
    return [tied, *sentences]


def vocab_order_inputs():
    """The hidden order tests' sentences (tag "07 build_vocab order"): four secret corpora with their min_freq,
    then one for the default min_freq and one read from a generator."""
    generator = secret_generator("07 build_vocab order")
    min_freqs = [2, 3, 1, _draw(generator, 2, 5)]
    corpora = [(secret_corpus(generator, m), m) for m in min_freqs]
    return corpora, secret_corpus(generator, 2), secret_corpus(generator, 1)


def vocab_order_facts(build_vocab):
    """build_vocab on the hidden order tests' inputs: each corpus, one with the default min_freq, one as a
    generator (read once), and no sentences at all."""
    corpora, default, once = vocab_order_inputs()
    return {"random": [vocab_facts(build_vocab, sentences, min_freq=min_freq) for sentences, min_freq in corpora],
            "default": vocab_facts(build_vocab, default),
            "generator": vocab_facts(build_vocab, (s for s in once), min_freq=1),
            "empty": vocab_facts(build_vocab, [])}


OTHER_SPECIALS = ("<s>", "</s>", "<unk>", "<pad>", "<mask>")
UNSEEN = "never-seen"   # no secret word: those have no hyphen


def vocab_specials_inputs():
    """The hidden specials tests' inputs (tag "07 build_vocab specials"): other specials in a secret order
    (never with <unk> first, so that "unknown -> id 0" shows), sentences in which two of them occur; then
    sentences in which every usual special occurs."""
    generator = secret_generator("07 build_vocab specials")
    specials = [s for s in OTHER_SPECIALS if s != "<unk>"]
    specials = _shuffled(specials, generator)
    specials.insert(_draw(generator, 1, len(specials)), "<unk>")
    seen = _shuffled([s for s in specials if s != "<unk>"], generator)[:2]
    words = secret_words(generator, 6)
    other = _sentences([w for w in words[:3] for _ in range(_draw(generator, 1, 4))] + seen * 2, generator)
    usual = _sentences([w for w in words[3:] for _ in range(_draw(generator, 1, 4))] + list(SPECIALS) * 2, generator)
    return tuple(specials), other, usual


def vocab_specials_calls(specials, other):
    """What the hidden specials test encodes and decodes with the first vocabulary: a seen word, a word never seen
    and the specials that occur in the sentences; the ids of its last, first and middle entries."""
    seen = list(dict.fromkeys(t for sentence in other for t in sentence))    # in the order they first appear
    words = [t for t in seen if t not in specials]
    size = len(specials) + len(words)
    return [[words[0], UNSEEN, *[t for t in seen if t in specials]]], [[size - 1, 0, size // 2]]


def vocab_specials_facts(build_vocab):
    specials, other, usual = vocab_specials_inputs()
    encode, decode = vocab_specials_calls(specials, other)
    return {"other": vocab_facts(build_vocab, other, encode=encode, decode=decode, min_freq=1, specials=specials),
            "usual": vocab_facts(build_vocab, usual, encode=[[UNSEEN, "<eos>"]])}


# ----------------------------------------------------------------------------- label_smoothing_loss

def _uses_builtin(*args, **kwargs):
    return bool(kwargs.get("label_smoothing", args[7] if len(args) > 7 else 0.0))


def no_builtin_smoothing(namespace):
    """Within the block, F.cross_entropy(..., label_smoothing=...) fails the test: the exercise is to write it."""
    return forbidden(namespace, torch.nn.functional, "cross_entropy", NO_BUILTIN, when=_uses_builtin)


def _sized_cases(generator, ranges):
    """(N, V, smoothing) for each ((N low, high), (V low, high), (smoothing low, high)) of ``ranges``."""
    return [(_draw(generator, *n), _draw(generator, *v), _uniform(generator, *s)) for n, v, s in ranges]


def _large_logits(generator):
    """Two rows of 3 logits, each with one of +80 to +90 and one of -80 to -90: softmax underflows to 0 in float32."""
    logits = torch.randn(2, 3, generator=generator) * 10
    for row in logits:
        high, low = torch.randperm(3, generator=generator)[:2].tolist()
        row[high], row[low] = _uniform(generator, 80, 90), -_uniform(generator, 80, 90)
    return logits


# ((N low, high), (V low, high), (smoothing low, high), scale of the logits) of the hidden value tests: small
# vocabularies with smoothing > 0 (where smoothing / (V - 1) shows), a large one, no smoothing, smoothing 1.
VALUE_RANGES = [((5, 9), (4, 6), (0.1, 0.3), 1.0), ((10, 14), (30, 40), (0.2, 0.3), 3.0), ((1, 1), (3, 4), (0.1, 0.2), 1.0),
                ((25, 35), (900, 1100), (0.05, 0.15), 5.0), ((4, 6), (10, 12), (0.0, 0.0), 2.0),
                ((8, 10), (5, 7), (0.4, 0.6), 1.0), ((4, 4), (4, 4), (1.0, 1.0), 1.0)]


def smoothing_value_cases():
    """(logits, target, keyword arguments) of the hidden value tests (tag "07 label_smoothing_loss values"):
    the sizes and smoothings of VALUE_RANGES, the default smoothing, and logits of size 80 to 90."""
    generator = secret_generator("07 label_smoothing_loss values")
    cases = []
    for (n, v, s, scale) in VALUE_RANGES:
        (N, V, smoothing), = _sized_cases(generator, [(n, v, s)])
        logits = torch.randn(N, V, generator=generator) * scale
        cases.append((logits, torch.randint(0, V, (N,), generator=generator), {"smoothing": smoothing}))
    N, V = _draw(generator, 4, 8), _draw(generator, 6, 12)
    cases.append((torch.randn(N, V, generator=generator), torch.randint(0, V, (N,), generator=generator), {}))
    cases.append((_large_logits(generator), torch.randint(0, 3, (2,), generator=generator), {}))
    return cases


INSIDE = "a token id"   # an ignore_index drawn from 1 .. V - 1


def smoothing_ignore_cases():
    """(logits, target, keyword arguments) of the hidden ignore tests (tag "07 label_smoothing_loss ignore"):
    some targets are ignore_index (0, an ordinary id, -100 or -1), at least one position counts and one does not."""
    generator = secret_generator("07 label_smoothing_loss ignore")
    cases = []
    for (n, v, s), ignore in zip([((8, 12), (6, 8), (0.1, 0.3)), ((14, 18), (11, 15), (0.1, 0.3)),
                                  ((6, 10), (4, 6), (0.05, 0.2)), ((18, 22), (40, 60), (0.1, 0.2)), ((5, 7), (4, 4), (0.0, 0.0))],
                                 [0, INSIDE, -100, -1, INSIDE]):
        (N, V, smoothing), = _sized_cases(generator, [(n, v, s)])
        ignore_index = _draw(generator, 1, V - 1) if ignore == INSIDE else ignore
        logits = torch.randn(N, V, generator=generator) * 2
        target = torch.randint(0, V, (N,), generator=generator)
        target[torch.rand(N, generator=generator) < 0.4] = ignore_index
        target[0] = (ignore_index + 1) % V            # at least one position counts
        target[-1] = ignore_index                     # and one does not
        cases.append((logits, target, {"smoothing": smoothing, "ignore_index": ignore_index}))
    return cases


def smoothing_gradient_cases():
    """(float64 logits, target, keyword arguments) of the hidden gradient tests (tag "07 label_smoothing_loss
    gradient"): every third position ignored."""
    generator = secret_generator("07 label_smoothing_loss gradient")
    cases = []
    for (N, V, smoothing), ignore_index in zip(_sized_cases(generator, [((5, 7), (6, 10), (0.05, 0.2)),
                                                                        ((10, 12), (15, 25), (0.2, 0.4))]), [0, -100]):
        x = torch.randn(N, V, generator=generator, dtype=torch.float64)
        target = torch.randint(1, V, (N,), generator=generator)
        target[::3] = ignore_index
        cases.append((x, target, {"smoothing": smoothing, "ignore_index": ignore_index}))
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

# ((d_model low, high), (warmup low, high), (factor low, high)) of the hidden value tests: two schedules with a factor
# far from 1 (where an ignored factor shows), one that warms up over a single step.
NOAM_RANGES = [((256, 1024), (2000, 6000), (1.0, 1.0)), ((64, 256), (200, 600), (1.5, 3.0)),
               ((512, 2048), (50, 150), (0.2, 0.7)), ((32, 128), (1, 1), (1.0, 1.0)), ((128, 512), (1000, 4000), (0.5, 2.0))]


def _schedule(generator, d_range, w_range, f_range):
    """(d_model (even), warmup_steps, factor) drawn from the ranges."""
    return 2 * _draw(generator, d_range[0] // 2, d_range[1] // 2), _draw(generator, *w_range), _uniform(generator, *f_range)


def noam_value_points():
    """(step, d_model, warmup_steps, factor) of the hidden value tests (tag "07 noam_lr values"): the schedules
    of NOAM_RANGES at steps 1, 2 and 7, around the end of the warm-up, far after it, and one step drawn at random."""
    generator = secret_generator("07 noam_lr values")
    points = []
    for ranges in NOAM_RANGES:
        d_model, warmup_steps, factor = _schedule(generator, *ranges)
        steps = [1, 2, 7, warmup_steps - 1, warmup_steps, warmup_steps + 1, 3 * warmup_steps + 5, 100000,
                 _draw(generator, 1, 5 * warmup_steps)]
        points += [(step, d_model, warmup_steps, factor) for step in steps if step >= 1]
    return points


def noam_step0_points():
    """(0, d_model, warmup_steps, factor) of the hidden step-0 tests (tag "07 noam_lr step 0")."""
    generator = secret_generator("07 noam_lr step 0")
    return [(0, *_schedule(generator, (32, 512), (100, 1000), (1.5, 3.0))),
            (0, *_schedule(generator, (32, 128), (1, 1), (1.0, 1.0)))]


def noam_scheduler():
    """(d_model, warmup_steps, steps): the hidden step-0 test's LambdaLR(lambda step: noam_lr(step, d_model,
    warmup_steps)) is asked steps 0 to steps - 1 (tag "07 noam_lr scheduler")."""
    generator = secret_generator("07 noam_lr scheduler")
    return 2 * _draw(generator, 16, 128), _draw(generator, 5, 20), 4


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
    point, and with ``scheduler`` those of the LambdaLR of noam_scheduler()."""
    d_model, warmup_steps, steps = noam_scheduler()
    return ([((step, d_model_, warmup_), {"factor": factor}) for step, d_model_, warmup_, factor in points]
            + [((step, d_model, warmup_steps), {}) for step in range(steps if scheduler else 0)])


def noam_types(noam_lr, calls):
    """The type of what noam_lr returned for each (args, kwargs) of ``calls`` (the exercise asks for a Python
    float): its name and whether it is a float; a Raised where the call raised."""
    def kind(*args, **kwargs):
        value = noam_lr(*args, **kwargs)
        return {"type": type(value).__name__, "is_float": isinstance(value, float)}
    return [attempt(kind, *args, **kwargs) for args, kwargs in calls]


# ----------------------------------------------------------------------------- train_step

def tiny_model(pad_idx=0, seed=0, src_vocab=11, tgt_vocab=13):
    """The course's Transformer, small, its weights drawn from ``seed``."""
    from transformer_course.model import Transformer

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


VISIBLE_DOUBLE_SEED = 7                     # the visible tests' stand-in for label_smoothing_loss
DOUBLE_TAG = "07 train_step loss double"    # the hidden tests' one: its weights are secret


def loss_double(seed):
    """A stand-in for label_smoothing_loss in train_step's tests (it is not an answer to that exercise): at each
    position whose target is not ignore_index, (1 - smoothing) * -log p[target] plus smoothing times a weighted
    SUM over the vocabulary of -log p[j], the weights drawn from ``seed`` in [0.5, 1.5); averaged over those
    positions. A sum where the loss takes a mean puts its value far from the label-smoothed cross-entropy, so a
    judge sees whether a step used it; its gradient is what autograd finds. Logits of any shape [..., V] work."""
    def label_smoothing_loss_stand_in(logits, target, smoothing=0.1, ignore_index=-100):
        weights = 0.5 + torch.rand(logits.size(-1), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        log_probs = logits.log_softmax(dim=-1)
        keep = target != ignore_index
        picked = log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
        spread = (log_probs * weights.to(log_probs)).sum(dim=-1)
        return -((1 - smoothing) * picked + smoothing * spread)[keep].mean()
    return label_smoothing_loss_stand_in


def hidden_double():
    """The hidden tests' stand-in for label_smoothing_loss, its weights drawn from the secret."""
    return loss_double(secret_seed(DOUBLE_TAG))


def visible_double():
    """The visible tests' stand-in for label_smoothing_loss."""
    return loss_double(VISIBLE_DOUBLE_SEED)


def stand_in_loss(namespace, double):
    """The block in which the answer's ``label_smoothing_loss`` is ``double``: a mistake in the student's loss
    costs points in its own exercise only, and the judge knows what the step computed."""
    return substituted(namespace, label_smoothing_loss=double)


def visible_stand_in(namespace):
    """The block in which the answer's ``label_smoothing_loss`` is the visible tests' stand-in."""
    return stand_in_loss(namespace, visible_double())


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
    with visible_stand_in(namespace):
        results = [attempt(train_step, model, src, tgt, optimizer, clip=1e6) for _ in range(2)]
    return {"results": results, "norms": norms}


def stepped(train_step, namespace, model, *args, **kwargs):
    """``train_step(model, *args, **kwargs)`` with the hidden stand-in for label_smoothing_loss: the loss it
    returned (or what it raised) and the parameters after it."""
    with stand_in_loss(namespace, hidden_double()):
        loss = attempt(train_step, model, *args, **kwargs)
    if isinstance(loss, float) and type(loss) is not float:   # a float subclass (numpy's) travels as a float
        loss = float(loss)
    return {"loss": loss, "params": params(model)}


SCHEDULE = (1.0, 0.01, 0.5, 0.2)   # LambdaLR's factor at steps 0, 1, 2, then 3 onwards


def schedule(step):
    return SCHEDULE[min(step, len(SCHEDULE) - 1)]


def _pad(generator):
    """A padding id other than 0, below both vocabularies' sizes (11 and 13): a hard-coded 0 shows."""
    return _draw(generator, 1, 10)


def train_loss_cases():
    """(pad_idx, smoothing, seed) of the hidden loss tests (tag "07 train_step loss"), smoothing never the default
    0.1 (so that one not passed on shows), then the seed of the test with the default arguments."""
    generator = secret_generator("07 train_step loss")
    smoothing = [_uniform(generator, 0.15, 0.45) for _ in range(3)]
    cases = [(0, smoothing[0], _seed(generator)), (_pad(generator), smoothing[1], _seed(generator)),
             (0, 0.0, _seed(generator)), (_pad(generator), smoothing[2], _seed(generator))]
    return cases, _seed(generator)


def update_cases():
    """(pad_idx, seed, the optimizer for some parameters) of the hidden update tests (tag "07 train_step update")."""
    generator = secret_generator("07 train_step update")
    return [(0, _seed(generator), lambda ps: torch.optim.SGD(ps, lr=0.5)),
            (_pad(generator), _seed(generator), lambda ps: torch.optim.SGD(ps, lr=0.3, momentum=0.9))]


def update_batches(pad_idx, seed):
    return [batch(pad_idx, seed + 20), batch(pad_idx, seed + 30, B=2, S=5, T=9)]


def clip_cases():
    """(pad_idx, seed, clip) of the hidden clipping tests (tag "07 train_step clip"): two clips far below the
    gradient's norm, one far above it."""
    generator = secret_generator("07 train_step clip")
    return [(0, _seed(generator), _uniform(generator, 0.005, 0.02)),
            (_pad(generator), _seed(generator), _uniform(generator, 0.02, 0.1)), (0, _seed(generator), 1e6)]


def scheduler_cases():
    """(pad_idx, seed) of the hidden scheduler tests (tag "07 train_step scheduler")."""
    generator = secret_generator("07 train_step scheduler")
    return [(0, _seed(generator)), (_pad(generator), _seed(generator))]


def train_step_loss_facts(train_step, namespace):
    """The hidden loss tests: one step with SGD(lr=0.01) per case, then one with the default arguments."""
    cases, default_seed = train_loss_cases()
    found = []
    for pad_idx, smoothing, seed in cases:
        model = tiny_model(pad_idx, seed)
        src, tgt = batch(pad_idx, seed + 10)
        found.append(stepped(train_step, namespace, model, src, tgt, torch.optim.SGD(model.parameters(), lr=0.01),
                             pad_idx=pad_idx, smoothing=smoothing))
    model = tiny_model(0, default_seed)
    src, tgt = batch(0, default_seed + 10)
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
    for pad_idx, seed, clip in clip_cases():
        model = tiny_model(pad_idx, seed)
        src, tgt = batch(pad_idx, seed + 40)
        found.append(stepped(train_step, namespace, model, src, tgt, torch.optim.SGD(model.parameters(), lr=1.0),
                             pad_idx=pad_idx, clip=clip))
    return found


def train_step_scheduler_facts(train_step, namespace):
    """The hidden scheduler tests: one step with SGD(lr=0.5), LambdaLR(schedule) and clip=1e6 (a mistake in the
    clipping costs points in its own test); the scheduler's count of steps and the optimizer's rate after it."""
    found = []
    for pad_idx, seed in scheduler_cases():
        model = tiny_model(pad_idx, seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        src, tgt = batch(pad_idx, seed + 50)
        facts = stepped(train_step, namespace, model, src, tgt, optimizer, scheduler, pad_idx=pad_idx, clip=1e6)
        facts.update(last_epoch=scheduler.last_epoch, lr=optimizer.param_groups[0]["lr"])
        found.append(facts)
    return found
