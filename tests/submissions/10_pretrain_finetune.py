"""Realistic answers to notebook 10. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""

PACK = '''
def pack_sequences(documents, block_size, eos_id):
    {check}
    stream = []
    for i, document in enumerate(documents):
        {before}
        stream.extend(int(t) for t in document)
        {after}
    n = len(stream) // block_size
    {blocks}
'''
CHECK = 'if block_size < 1:\n        raise ValueError("block_size must be at least 1")'
AFTER = "stream.append(eos_id)"
BLOCKS = "return torch.tensor(stream[:n * block_size], dtype=torch.long).view(n, block_size)"


def pack(check=CHECK, before="", after=AFTER, blocks=BLOCKS):
    return PACK.format(check=check, before=before, after=after, blocks=blocks)


MASK = '''
def document_mask(block, eos_id):
    is_eos = (block == eos_id).long()
    document = {document}
    same = document[:, :, None] == document[:, None, :]
    T = block.size(1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    {result}
'''
STRICT = "torch.cumsum(is_eos, dim=1) - is_eos"
RESULT = "return (same & causal)[:, None]"


def mask(document=STRICT, result=RESULT):
    return MASK.format(document=document, result=result)


SFT = '''
def sft_example(prompt_ids, answer_ids, eos_id):
    prompt, answer = [int(t) for t in prompt_ids], [int(t) for t in answer_ids]
    {check}
    sequence = torch.tensor(prompt + answer + {eos}, dtype=torch.long)
    inputs, targets = {pair}
    loss_mask = torch.zeros(len(targets), dtype=torch.bool)
    {mark}
    return inputs, targets, loss_mask
'''
SFT_CHECK = 'if not prompt:\n        raise ValueError("empty prompt")'
MARK = "loss_mask[len(prompt) - 1:] = True"


def sft(check=SFT_CHECK, eos="[eos_id]", pair="sequence[:-1], sequence[1:]", mark=MARK):
    return SFT.format(check=check, eos=eos, pair=pair, mark=mark)


LOSS = '''
def sft_loss(logits, targets, loss_mask):
    log_probs = F.log_softmax(logits.float(), dim=-1)
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    {reduce}
'''


def loss(reduce):
    return LOSS.format(reduce=reduce)


LORA = '''
class LoRALinear(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        {freeze}
        self.scale = {scale}
        self.A = nn.Parameter(torch.empty(r, base.in_features))
        self.B = nn.Parameter(torch.empty(base.out_features, r))
        {init}

    def forward(self, x):
        return self.base(x) + self.scale * (x @ self.A.T @ self.B.T)

    def merged(self):
        {merge}
'''
FREEZE = "for p in base.parameters():\n            p.requires_grad_(False)"
INIT = "nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))\n        nn.init.zeros_(self.B)"
MERGE = '''linear = nn.Linear(self.base.in_features, self.base.out_features)
        with torch.no_grad():
            linear.weight.copy_(self.base.weight + {delta})
            linear.bias.copy_(self.base.bias)
        return linear'''


def lora(freeze=FREEZE, scale="alpha / r", init=INIT, merge=MERGE.format(delta="self.scale * self.B @ self.A")):
    return LORA.format(freeze=freeze, scale=scale, init=init, merge=merge)


ADD = '''
def add_lora(model, r, alpha):
    {freeze_first}
    for module in list(model.modules()):
        if {which}:
            for name in {names}:
                setattr(module, name, LoRALinear(getattr(module, name), r, alpha))
    {freeze_last}
    {ret}
'''
FREEZE_ALL = "for p in model.parameters():\n        p.requires_grad_(False)"
ATTENTION = "isinstance(module, MultiHeadAttention)"
FOUR = '("w_q", "w_k", "w_v", "w_o")'


def add(freeze_first=FREEZE_ALL, which=ATTENTION, names=FOUR, freeze_last="", ret="return model"):
    return ADD.format(freeze_first=freeze_first, which=which, names=names, freeze_last=freeze_last, ret=ret)


WRONG = [
    # pack_sequences
    Answer("pack_sequences", "puts <eos> before each document", pack(before="stream.append(eos_id)", after=""),
           "before each document"),
    Answer("pack_sequences", "no <eos> at all", pack(after=""), "no <eos> between the documents"),
    Answer("pack_sequences", "<eos> only between documents, not after the last",
           pack(after="if i < len(documents) - 1:\n            stream.append(eos_id)"),
           "no <eos> after the last document"),
    Answer("pack_sequences", "pads the last block with <eos>", pack(blocks='''if len(stream) % block_size:
        stream += [eos_id] * (block_size - len(stream) % block_size)
    return torch.tensor(stream, dtype=torch.long).view(-1, block_size)'''), "the last, incomplete block is padded"),
    Answer("pack_sequences", "float blocks (torch.Tensor of the ids)",
           pack(blocks="return torch.Tensor(stream[:n * block_size]).view(n, block_size)"), "token ids are integers"),
    Answer("pack_sequences", "no ValueError for a block size below 1", pack(check="pass"), "should raise ValueError"),
    # document_mask
    Answer("document_mask", "an <eos> starts the next document (cumsum includes it)",
           mask(document="torch.cumsum(is_eos, dim=1)"), "an <eos> is put in the document after it"),
    Answer("document_mask", "not causal", mask(result="return same[:, None]"), "the mask is not causal"),
    Answer("document_mask", "causal only: documents not kept apart",
           mask(result="return causal.expand(block.size(0), T, T)[:, None]"), "the documents are not kept apart"),
    Answer("document_mask", "[B, T, T]: no head dimension", mask(result="return same & causal"),
           "broadcast over the heads"),
    Answer("document_mask", "the first row's documents for every row",
           mask(document="(torch.cumsum(is_eos, dim=1) - is_eos)[:1].expand_as(block)"),
           "every row of the batch gets the mask of the first row"),
    Answer("document_mask", "True marks what is hidden", mask(result="return ~(same & causal)[:, None]"),
           "the polarity is inverted"),
    # sft_example
    Answer("sft_example", "the mask starts at the answer's position in the inputs",
           sft(mark="loss_mask[len(prompt):] = True"), "misses the answer's first token"),
    Answer("sft_example", "scores the prompt too", sft(mark="loss_mask[:] = True"), "the prompt's tokens are counted"),
    Answer("sft_example", "leaves the final <eos> out of the loss",
           sft(mark="loss_mask[len(prompt) - 1:-1] = True"), "the final <eos> is not counted"),
    Answer("sft_example", "no <eos> after the answer", sft(eos="[]"), "there is no <eos> after the answer"),
    Answer("sft_example", "inputs and targets not shifted", sft(pair="sequence[:-1], sequence[:-1]"),
           "inputs and targets are the same tokens"),
    Answer("sft_example", "no ValueError for an empty prompt", sft(check="pass"), "should raise ValueError"),
    # sft_loss
    Answer("sft_loss", "averages every position, the mask ignored", loss("return nll.mean()"),
           "every position is averaged"),
    Answer("sft_loss", "zeros the unmarked positions, then averages them all", loss("return (nll * loss_mask).mean()"),
           "still counted in the mean"),
    Answer("sft_loss", "a mean of per-sequence means", loss(
        "rows = [nll[b][loss_mask[b]].mean() for b in range(len(nll)) if loss_mask[b].any()]\n"
        "    return torch.stack(rows).mean()"), "a mean of per-sequence means"),
    Answer("sft_loss", "shifts logits and targets once more", loss(
        "nll = -F.log_softmax(logits[:, :-1].float(), -1).gather(-1, targets[:, 1:, None])[..., 0]\n"
        "    return nll[loss_mask[:, 1:]].mean()"), "shifted once more"),
    Answer("sft_loss", "returns a Python float", loss("return (nll[loss_mask].sum() / loss_mask.sum()).item()"),
           "torch.Tensor"),
    # LoRALinear
    Answer("LoRALinear", "scales the update by alpha", lora(scale="alpha"), "scaled by alpha instead of alpha / r"),
    Answer("LoRALinear", "scales the update by r / alpha", lora(scale="r / alpha"), "r / alpha"),
    Answer("LoRALinear", "A at zero, B random (the roles swapped)",
           lora(init="nn.init.zeros_(self.A)\n        nn.init.kaiming_uniform_(self.B, a=math.sqrt(5))"),
           "B must start at zero"),
    Answer("LoRALinear", "A and B both at zero", lora(init="nn.init.zeros_(self.A)\n        nn.init.zeros_(self.B)"),
           "A must start random"),
    Answer("LoRALinear", "A from a standard Gaussian", lora(init="nn.init.normal_(self.A)\n        nn.init.zeros_(self.B)"),
           "should start uniform in"),
    Answer("LoRALinear", "the base layer left trainable", lora(freeze="pass"), "freeze them"),
    Answer("LoRALinear", "merged() without the scale", lora(merge=MERGE.format(delta="self.B @ self.A")),
           "not scaled by alpha / r"),
    Answer("LoRALinear", "merged() adds the update into the base layer itself", lora(merge='''with torch.no_grad():
            self.base.weight += self.scale * self.B @ self.A
        return self.base'''), "merged() changed the layer itself"),
    # add_lora
    Answer("add_lora", "forgets to freeze the model", add(freeze_first=""),
           "parameters of the pre-trained model stay trainable"),
    Answer("add_lora", "freezes after wrapping: nothing left to train", add(freeze_first="", freeze_last=FREEZE_ALL),
           "no parameter is trainable"),
    Answer("add_lora", "wraps w_q and w_v only", add(names='("w_q", "w_v")'), "these projections were not wrapped"),
    Answer("add_lora", "wraps every nn.Linear, the feed-forward's too", add(
        which='isinstance(module, (MultiHeadAttention, PositionwiseFeedForward))',
        names='[n for n in ("w_q", "w_k", "w_v", "w_o", "linear1", "linear2") if hasattr(module, n)]'),
           "layers other than the attention projections"),
    Answer("add_lora", "wraps the first block only", add(which="module is model.blocks[0].attn"),
           "these projections were not wrapped"),
    Answer("add_lora", "returns nothing", add(ret="pass"), "should return the model"),
]


UNUSUAL = [
    Answer("pack_sequences", "itertools.chain and a reshape of a tensor", '''
import itertools


def pack_sequences(documents, block_size, eos_id):
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    stream = torch.tensor(list(itertools.chain.from_iterable([*d, eos_id] for d in documents)), dtype=torch.int64)
    usable = stream.numel() - stream.numel() % block_size
    return stream[:usable].reshape(-1, block_size)
'''),
    Answer("document_mask", "loops over rows, queries and keys", '''
def document_mask(block, eos_id):
    B, T = block.shape
    mask = torch.zeros(B, 1, T, T, dtype=torch.bool)
    for b in range(B):
        starts = [0] + [t + 1 for t in range(T) if block[b, t] == eos_id]
        for i in range(T):
            start = max(s for s in starts if s <= i)
            mask[b, 0, i, start:i + 1] = True
    return mask
'''),
    Answer("sft_example", "torch.cat of tensors, the mask from a comparison", '''
def sft_example(prompt_ids, answer_ids, eos_id):
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long).flatten()
    if prompt.numel() == 0:
        raise ValueError("a prompt needs a token")
    answer = torch.as_tensor(answer_ids, dtype=torch.long).flatten()
    sequence = torch.cat([prompt, answer, torch.tensor([eos_id])])
    positions = torch.arange(1, sequence.numel())
    return sequence[:-1].clone(), sequence[1:].clone(), positions >= prompt.numel()
'''),
    Answer("sft_loss", "F.cross_entropy with ignore_index on the unmarked targets", '''
def sft_loss(logits, targets, loss_mask):
    labels = targets.masked_fill(~loss_mask, -100)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
'''),
    Answer("LoRALinear", "the effective weight formed in forward; uniform A written out; merge() by that name", '''
class LoRALinear(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        base.requires_grad_(False)
        self.base, self.r, self.alpha = base, r, alpha
        bound = 1 / math.sqrt(base.in_features)
        self.A = nn.Parameter(torch.empty(r, base.in_features).uniform_(-bound, bound))
        self.B = nn.Parameter(torch.zeros(base.out_features, r))

    def weight(self):
        return self.base.weight + (self.alpha / self.r) * self.B @ self.A

    def forward(self, x):
        return F.linear(x, self.weight(), self.base.bias)

    def merge(self):
        out = nn.Linear(self.base.in_features, self.base.out_features)
        out.weight.data = self.weight().detach().clone()
        out.bias.data = self.base.bias.detach().clone()
        return out
'''),
    Answer("add_lora", "named_modules and hasattr, requires_grad_ on the whole model", '''
def add_lora(model, r, alpha):
    model.requires_grad_(False)
    targets = [module for _, module in model.named_modules() if all(hasattr(module, n) for n in ("w_q", "w_k", "w_v", "w_o"))]
    for module in targets:
        module.w_q = LoRALinear(module.w_q, r, alpha)
        module.w_k = LoRALinear(module.w_k, r, alpha)
        module.w_v = LoRALinear(module.w_v, r, alpha)
        module.w_o = LoRALinear(module.w_o, r, alpha)
    return model
'''),
]
