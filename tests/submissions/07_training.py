"""Realistic answers to notebook 07. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""

# ---------------------------------------------------------------------------- build_vocab

VOCAB = '''
def build_vocab(sentences, min_freq=2, specials=("<pad>", "<unk>", "<bos>", "<eos>")):
    counts = Counter()
    for tokens in sentences:
        counts.update({update})
    {select}
    return Vocab(list(specials) + kept)
'''


def vocab(select, update="tokens"):
    return VOCAB.format(select=select, update=update)


RIGHT_SELECT = ("kept = [t for t in counts if counts[t] >= min_freq and t not in specials]\n"
                "    kept.sort(key=lambda t: (-counts[t], t))")

OWN_VOCAB_CLASS = '''
def build_vocab(sentences, min_freq=2, specials=("<pad>", "<unk>", "<bos>", "<eos>")):
    class SimpleVocab:
        def __init__(self, itos):
            self.itos = itos
            self.stoi = {token: i for i, token in enumerate(itos)}

        def __len__(self):
            return len(self.itos)

        def encode(self, tokens):
            return [self.stoi.get(token, {unknown}) for token in tokens]

        def decode(self, ids):
            return [self.itos[int(i)] for i in ids]

    counts = Counter(token for tokens in sentences for token in tokens)
    kept = sorted((t for t in counts if counts[t] >= min_freq and t not in specials), key=lambda t: (-counts[t], t))
    return SimpleVocab(list(specials) + kept)
'''

# ---------------------------------------------------------------------------- label_smoothing_loss

SMOOTHING = '''
def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    log_probs = {log_probs}
    keep = target != ignore_index
    safe = target.masked_fill(~keep, 0)
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs.mean(dim=-1)
    loss = (1 - smoothing) * nll + smoothing * uniform
    return {reduce}
'''


def smoothing(log_probs="logits.log_softmax(dim=-1)", reduce="loss[keep].mean()"):
    return SMOOTHING.format(log_probs=log_probs, reduce=reduce)


# ---------------------------------------------------------------------------- noam_lr

NOAM = '''
def noam_lr(step, d_model, warmup_steps, factor=1.0):
    {first}
    return {formula}
'''
RIGHT_FORMULA = "factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)"


def noam(formula=RIGHT_FORMULA, first="step = max(step, 1)"):
    return NOAM.format(first=first, formula=formula)


# ---------------------------------------------------------------------------- train_step

STEP = '''
def train_step(model, src, tgt, optimizer, scheduler=None, pad_idx=0, smoothing=0.1, clip=1.0):
    logits = model(src, {decoder_input})
    loss = label_smoothing_loss(logits.reshape(-1, logits.size(-1)), {labels}.reshape(-1), {loss_args})
    {after_loss}
    return {result}
'''
RIGHT_AFTER = """loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad()"""

STEP_OWN_LOSS = '''
def train_step(model, src, tgt, optimizer, scheduler=None, pad_idx=0, smoothing=0.1, clip=1.0):
    logits = model(src, tgt[:, :-1])
    loss = {loss}
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad()
    return loss.item()
'''


def step(decoder_input="tgt[:, :-1]", labels="tgt[:, 1:]",
         loss_args="smoothing=smoothing, ignore_index=pad_idx", after_loss=RIGHT_AFTER, result="loss.item()"):
    return STEP.format(decoder_input=decoder_input, labels=labels, loss_args=loss_args, after_loss=after_loss,
                       result=result)


WRONG = [
    # build_vocab
    Answer("build_vocab", "ties in first-seen order (Counter.most_common)",
           vocab("kept = [t for t, n in counts.most_common() if n >= min_freq and t not in specials]"), "first appear"),
    Answer("build_vocab", "sorted(..., reverse=True) reverses the tie-break too",
           vocab("kept = [t for t, n in sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)\n"
                 "            if n >= min_freq and t not in specials]"), "reverse alphabetical"),
    Answer("build_vocab", "min_freq off by one (> instead of >=)",
           vocab(RIGHT_SELECT.replace(">= min_freq", "> min_freq")), "count >= min_freq"),
    Answer("build_vocab", "specials that occur in the data are added twice",
           vocab(RIGHT_SELECT.replace(" and t not in specials", "")), "leave the specials out"),
    Answer("build_vocab", "counts a token once per sentence",
           vocab(RIGHT_SELECT, update="set(tokens)"), "once per sentence"),
    Answer("build_vocab", "ascending counts",
           vocab(RIGHT_SELECT.replace("(-counts[t], t)", "(counts[t], t)")), "ascending count"),
    Answer("build_vocab", "reads the sentences twice (a generator is empty the second time)", '''
def build_vocab(sentences, min_freq=2, specials=("<pad>", "<unk>", "<bos>", "<eos>")):
    words = {token for tokens in sentences for token in tokens}
    counts = Counter(token for tokens in sentences for token in tokens)
    kept = sorted((t for t in words if counts[t] >= min_freq and t not in specials), key=lambda t: (-counts[t], t))
    return Vocab(list(specials) + kept)
''', "a second pass over `sentences` finds nothing"),
    Answer("build_vocab", "its own vocabulary class maps unknown tokens to 0 (<pad>)",
           OWN_VOCAB_CLASS.replace("{unknown}", "0"), "unknown tokens get the id of <unk>"),
    # label_smoothing_loss
    Answer("label_smoothing_loss", "calls F.cross_entropy with label_smoothing",
           '''
def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    return F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)
''', "write it yourself"),
    Answer("label_smoothing_loss", "nn.CrossEntropyLoss with label_smoothing",
           '''
def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    return nn.CrossEntropyLoss(ignore_index=ignore_index, label_smoothing=smoothing)(logits, target)
''', "write it yourself"),
    Answer("label_smoothing_loss", "spreads smoothing / (V - 1) over the other tokens (the Annotated Transformer's way)",
           '''
def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    log_probs = logits.log_softmax(dim=-1)
    keep = target != ignore_index
    true_dist = torch.full_like(log_probs, smoothing / (logits.size(-1) - 1))
    true_dist.scatter_(1, target.masked_fill(~keep, 0).unsqueeze(1), 1 - smoothing)
    loss = -(true_dist * log_probs).sum(dim=-1)
    return loss[keep].mean()
''', "smoothing / (V - 1)"),
    Answer("label_smoothing_loss", "only the (1 - smoothing) * NLL term",
           smoothing().replace("loss = (1 - smoothing) * nll + smoothing * uniform", "loss = (1 - smoothing) * nll"),
           "only the first term"),
    Answer("label_smoothing_loss", "divides by all positions, ignored ones included",
           smoothing(reduce="(loss * keep).sum() / len(target)"), "divided by all"),
    Answer("label_smoothing_loss", "averages over all positions, the ignored ones too",
           smoothing(reduce="loss.mean()"), "ignore_index out"),
    Answer("label_smoothing_loss", "uses the logits as log-probabilities", smoothing(log_probs="logits"), "apply log_softmax"),
    Answer("label_smoothing_loss", "log_softmax over the wrong dimension",
           smoothing(log_probs="logits.log_softmax(dim=0)"), "wrong dimension"),
    Answer("label_smoothing_loss", "log(softmax(...)) overflows for large logits",
           smoothing(log_probs="torch.log(torch.softmax(logits, dim=-1))"), "NaN or inf"),
    Answer("label_smoothing_loss", "returns a float (.item())", smoothing(reduce="loss[keep].mean().item()"),
           "should return a torch.Tensor"),
    Answer("label_smoothing_loss", "indexes with the ignored targets (-100)",
           '''
def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    log_probs = logits.log_softmax(dim=-1)
    keep = target != ignore_index
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    loss = (1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)
    return loss[keep].mean()
''', "not valid indices"),
    # noam_lr
    Answer("noam_lr", "step 0 divides by zero", noam(first="pass"), "step 0 must count as step 1"),
    Answer("noam_lr", "min and max swapped", noam(RIGHT_FORMULA.replace("min(", "max(")),
           "the rate is the smaller of the two terms", misleading="warm-up exponent is wrong"),
    Answer("noam_lr", "warm-up exponent -0.5 instead of -1.5", noam(RIGHT_FORMULA.replace("** -1.5", "** -0.5")),
           "warm-up exponent is wrong"),
    Answer("noam_lr", "factor ignored", noam(RIGHT_FORMULA.replace("factor * ", "")), "factor is ignored"),
    Answer("noam_lr", "d_model^-0.5 missing", noam(RIGHT_FORMULA.replace("d_model ** -0.5 * ", "")),
           "d_model ** -0.5 is missing"),
    Answer("noam_lr", "step + 1 everywhere", noam(first="step = step + 1"), "shifted by one"),
    Answer("noam_lr", "returns a tensor, not the Python float the exercise asks for", '''
def noam_lr(step, d_model, warmup_steps, factor=1.0):
    step = torch.tensor(float(max(step, 1)))
    return factor * d_model ** -0.5 * torch.minimum(step ** -0.5, step * warmup_steps ** -1.5)
''', "return a Python float"),
    # train_step
    Answer("train_step", "labels are the decoder input (not shifted)", step(labels="tgt[:, :-1]"), "decoder's input"),
    Answer("train_step", "the decoder reads the whole target", step(decoder_input="tgt"), "the decoder reads tgt[:, :-1]"),
    Answer("train_step", "labels not shifted and input not shifted", step(decoder_input="tgt", labels="tgt"),
           "the decoder reads tgt[:, :-1]"),
    Answer("train_step", "padding not ignored", step(loss_args="smoothing=smoothing"), "ignore_index=pad_idx"),
    Answer("train_step", "padding id hard-coded as 0", step(loss_args="smoothing=smoothing, ignore_index=0"),
           "hard-coded"),
    Answer("train_step", "smoothing not passed on", step(loss_args="ignore_index=pad_idx"), "pass it on"),
    Answer("train_step", "returns the loss tensor", step(result="loss"), "loss.item()"),
    # issue 50: the plain cross-entropy passed every visible test, and the hidden ones blamed clipping and the scheduler
    Answer("train_step", "F.cross_entropy without label smoothing instead of label_smoothing_loss",
           STEP_OWN_LOSS.format(loss="F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), "
                                     "ignore_index=pad_idx)"),
           "without label smoothing", misleading="clip_grad_norm_"),
    Answer("train_step", "nn.CrossEntropyLoss without label smoothing instead of label_smoothing_loss",
           STEP_OWN_LOSS.format(loss="nn.CrossEntropyLoss(ignore_index=pad_idx)(logits.flatten(0, 1), tgt[:, 1:].flatten())"),
           "without label smoothing", misleading="scheduler.step()"),
    Answer("train_step", "clips before backward",
           step(after_loss=RIGHT_AFTER.replace("loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)",
                                               "torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n    loss.backward()")),
           "after loss.backward() and before optimizer.step()"),
    Answer("train_step", "clips after the update",
           step(after_loss="""loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad()"""), "after loss.backward() and before optimizer.step()"),
    Answer("train_step", "clips by value", step(after_loss=RIGHT_AFTER.replace("clip_grad_norm_", "clip_grad_value_")),
           "clip_grad_norm_"),
    Answer("train_step", "never zeroes the gradients", step(after_loss=RIGHT_AFTER.replace("\n    optimizer.zero_grad()", "")),
           "the second optimizer.step() received gradients"),
    Answer("train_step", "zeroes the gradients between backward and step",
           step(after_loss="""loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.zero_grad()
    optimizer.step()
    if scheduler is not None:
        scheduler.step()"""), "do not zero the gradients between backward() and step()"),
    Answer("train_step", "steps the scheduler before the optimizer",
           step(after_loss="""loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    if scheduler is not None:
        scheduler.step()
    optimizer.step()
    optimizer.zero_grad()"""), "call scheduler.step() after optimizer.step()"),
    Answer("train_step", "never steps the scheduler",
           step(after_loss=RIGHT_AFTER.replace("    if scheduler is not None:\n        scheduler.step()\n", "")),
           "call scheduler.step() once"),
]

UNUSUAL = [
    # build_vocab
    Answer("build_vocab", "a stable double sort (alphabetical, then by count with reverse=True)", '''
def build_vocab(sentences, min_freq=2, specials=("<pad>", "<unk>", "<bos>", "<eos>")):
    counts = Counter()
    for sentence in sentences:
        for token in sentence:
            counts[token] += 1
    alphabetical = sorted(t for t in counts if counts[t] >= min_freq)
    by_count = sorted(alphabetical, key=counts.get, reverse=True)   # stable: ties stay alphabetical
    return Vocab(list(dict.fromkeys([*specials, *by_count])))       # a special seen in the data stays first
'''),
    Answer("build_vocab", "its own vocabulary class", OWN_VOCAB_CLASS.replace("{unknown}", 'self.stoi["<unk>"]')),
    Answer("build_vocab", "a plain dict and itertools", '''
def build_vocab(sentences, min_freq=2, specials=("<pad>", "<unk>", "<bos>", "<eos>")):
    import itertools
    counts = {}
    for token in itertools.chain.from_iterable(sentences):
        counts[token] = counts.get(token, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    itos = list(specials)
    itos += [token for token, n in ranked if n >= min_freq and token not in set(specials)]
    return Vocab(itos)
'''),
    # label_smoothing_loss
    Answer("label_smoothing_loss", "the smoothed distribution built explicitly, masked by multiplication", '''
def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    V = logits.size(-1)
    keep = (target != ignore_index)
    one_hot = F.one_hot(torch.where(keep, target, torch.zeros_like(target)), V).to(logits.dtype)
    q = (1 - smoothing) * one_hot + smoothing / V
    per_position = -(q * F.log_softmax(logits, dim=1)).sum(dim=1)
    return (per_position * keep).sum() / keep.sum()
'''),
    Answer("label_smoothing_loss", "F.nll_loss for the first term, logsumexp for the log-probabilities", '''
def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    nll = F.nll_loss(log_probs, target, ignore_index=ignore_index)
    keep = target != ignore_index
    smooth = -log_probs[keep].mean()          # mean over positions and tokens = mean over positions of the token mean
    return (1 - smoothing) * nll + smoothing * smooth
'''),
    Answer("label_smoothing_loss", "F.cross_entropy without smoothing for the NLL term", '''
def label_smoothing_loss(logits, target, smoothing=0.1, ignore_index=-100):
    nll = F.cross_entropy(logits, target, ignore_index=ignore_index)
    keep = target != ignore_index
    uniform = -torch.log_softmax(logits[keep], dim=-1).mean(dim=-1).mean()
    return (1.0 - smoothing) * nll + smoothing * uniform
'''),
    # noam_lr
    Answer("noam_lr", "the two branches with if/else", '''
def noam_lr(step, d_model, warmup_steps, factor=1.0):
    if step == 0:
        step = 1
    if step < warmup_steps:
        rate = step / warmup_steps ** 1.5
    else:
        rate = 1 / math.sqrt(step)
    return factor * rate / math.sqrt(d_model)
'''),
    Answer("noam_lr", "math.pow and `step or 1`", '''
def noam_lr(step, d_model, warmup_steps, factor=1.0):
    step = step or 1
    return factor * math.pow(d_model, -0.5) * min(math.pow(step, -0.5), step * math.pow(warmup_steps, -1.5))
'''),
    # train_step
    Answer("train_step", "zeroes the gradients at the start, flattens with flatten()", '''
def train_step(model, src, tgt, optimizer, scheduler=None, pad_idx=0, smoothing=0.1, clip=1.0):
    model.zero_grad(set_to_none=True)
    decoder_input, labels = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, decoder_input)
    loss = label_smoothing_loss(logits.flatten(0, 1), labels.flatten(), smoothing, pad_idx)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
    optimizer.step()
    if scheduler:
        scheduler.step()
    return float(loss)
'''),
    Answer("train_step", "computes the label-smoothed loss itself, with F.cross_entropy",
           STEP_OWN_LOSS.format(loss="F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), "
                                     "label_smoothing=smoothing, ignore_index=pad_idx)")),
    Answer("train_step", "calls encode, decode and generator itself", '''
def train_step(model, src, tgt, optimizer, scheduler=None, pad_idx=0, smoothing=0.1, clip=1.0):
    decoder_input = tgt[:, :-1]
    src_mask = padding_mask(src, model.pad_idx)
    memory = model.encode(src, src_mask)
    hidden = model.decode(decoder_input, memory, src_mask, target_mask(decoder_input, model.pad_idx))
    logits = model.generator(hidden)
    loss = label_smoothing_loss(logits.view(-1, logits.shape[-1]), tgt[:, 1:].contiguous().view(-1),
                                smoothing=smoothing, ignore_index=pad_idx)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.detach().item()
'''),
]
