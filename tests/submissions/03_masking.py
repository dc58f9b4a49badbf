"""Realistic answers to notebook 03. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""

PADDING_MASK = '''
def padding_mask(tokens, pad_idx):
    {check}
    return {body}
'''
PADDING_CHECK = 'if tokens.dim() != 2:\n        raise ValueError(f"tokens must be [batch, seq], got {tokens.shape}")'

CAUSAL_MASK = '''
def causal_mask(size, device=None):
    {check}
    return {body}
'''
CAUSAL_CHECK = 'if size < 1:\n        raise ValueError(f"size must be positive, got {size}")'

TARGET_MASK = '''
def target_mask(tokens, pad_idx):
    return {body}
'''


def padding(body="(tokens != pad_idx)[:, None, None, :]", check=PADDING_CHECK):
    return PADDING_MASK.format(check=check, body=body)


def causal(body="torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]", check=CAUSAL_CHECK):
    return CAUSAL_MASK.format(check=check, body=body)


def target(body):
    return TARGET_MASK.format(body=body)


WRONG = [
    # padding_mask
    Answer("padding_mask", "inverted polarity (True marks the padding)",
           padding("(tokens == pad_idx)[:, None, None, :]"), "the polarity is inverted"),
    Answer("padding_mask", "returns [B, T], without the broadcast dimensions",
           padding("tokens != pad_idx"), "add the two dimensions of size 1"),
    Answer("padding_mask", "puts T on the query axis: [B, 1, T, 1]",
           padding("(tokens != pad_idx).unsqueeze(1).unsqueeze(-1)"), "query axis"),
    Answer("padding_mask", "puts T on the head axis: [B, T, 1, 1]",
           padding("(tokens != pad_idx)[:, :, None, None]"), "T goes last"),
    Answer("padding_mask", "adds only one of the two dimensions: [B, 1, T]",
           padding("(tokens != pad_idx).unsqueeze(1)"), "one dimension of size 1 is missing"),
    Answer("padding_mask", "returns a long tensor instead of bool",
           padding("(tokens != pad_idx).long()[:, None, None, :]"), "expected torch.bool"),
    Answer("padding_mask", "returns an additive float mask (0 / -inf, PyTorch's float attn_mask)",
           padding("torch.zeros(tokens.shape).masked_fill(tokens == pad_idx, float('-inf'))[:, None, None, :]"),
           "expected torch.bool"),
    Answer("padding_mask", "hard-codes the padding id 0",
           padding("(tokens != 0)[:, None, None, :]"), "pad_idx is ignored"),
    Answer("padding_mask", "uses > (assumes the padding id is the smallest id)",
           padding("(tokens > pad_idx)[:, None, None, :]"), "use !=, not >"),
    Answer("padding_mask", "counts the real tokens and assumes the padding is at the end",
           padding("(torch.arange(tokens.size(1))[None, :] < (tokens != pad_idx).sum(1, keepdim=True))[:, None, None, :]"),
           "assumes the padding sits at the end"),
    Answer("padding_mask", "never checks that tokens is two-dimensional",
           padding("(tokens != pad_idx).unsqueeze(1).unsqueeze(1)", check="pass"), "should raise ValueError"),
    # causal_mask
    Answer("causal_mask", "upper-triangular (triu)",
           causal("torch.ones(size, size, dtype=torch.bool, device=device).triu()[None, None]"),
           "upper- instead of lower-triangular"),
    Answer("causal_mask", "strict lower triangle: the diagonal is masked",
           causal("torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal=-1)[None, None]"),
           "cannot attend to itself"),
    Answer("causal_mask", "inverted polarity (the Annotated Transformer's triu(diagonal=1) without == 0)",
           causal("torch.triu(torch.ones(1, 1, size, size, dtype=torch.bool, device=device), diagonal=1)"),
           "the polarity is inverted"),
    Answer("causal_mask", "one future token visible (tril with diagonal=1)",
           causal("torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal=1)[None, None]"),
           "position 0 attends to position 1"),
    Answer("causal_mask", "float mask (torch.tril of torch.ones without .bool())",
           causal("torch.tril(torch.ones(size, size, device=device))[None, None]"), "expected torch.bool"),
    Answer("causal_mask", "missing the batch and head dimensions",
           causal("torch.ones(size, size, dtype=torch.bool, device=device).tril()"), "add two leading dimensions"),
    Answer("causal_mask", "ignores the device argument",
           causal("torch.ones(size, size, dtype=torch.bool).tril()[None, None]"), "create the mask on the given device"),
    Answer("causal_mask", "never checks the size",
           causal(check="pass"), "should raise ValueError"),
    # target_mask
    Answer("target_mask", "only the causal part",
           target("causal_mask(tokens.size(1), device=tokens.device)"), "the causal mask alone"),
    Answer("target_mask", "only the padding part",
           target("padding_mask(tokens, pad_idx)"), "the padding mask alone"),
    Answer("target_mask", "combines the masks with | instead of &",
           target("padding_mask(tokens, pad_idx) | causal_mask(tokens.size(1), device=tokens.device)"), "use &"),
    Answer("target_mask", "masks the padded queries instead of the keys (padding mask transposed)",
           target("padding_mask(tokens, pad_idx).transpose(-1, -2) & causal_mask(tokens.size(1), device=tokens.device)"),
           "never the queries"),
    Answer("target_mask", "masks the padded queries as well as the keys",
           target("padding_mask(tokens, pad_idx) & padding_mask(tokens, pad_idx).transpose(-1, -2) "
                  "& causal_mask(tokens.size(1), device=tokens.device)"),
           "never the queries"),
    Answer("target_mask", "reads T from the batch dimension",
           target("padding_mask(tokens, pad_idx) & causal_mask(tokens.size(0), device=tokens.device)"),
           "T = tokens.size(1)"),
    Answer("target_mask", "builds the causal part on the CPU whatever the tokens' device",
           target("padding_mask(tokens, pad_idx) & causal_mask(tokens.size(1))"), "device=tokens.device"),
    Answer("target_mask", "its own causal part, upper-triangular",
           target("padding_mask(tokens, pad_idx) & torch.ones(tokens.size(1), tokens.size(1), dtype=torch.bool, "
                  "device=tokens.device).triu()"),
           "upper- instead of lower-triangular"),
    Answer("target_mask", "its own padding part, with the polarity inverted",
           target("(tokens == pad_idx)[:, None, None, :] & causal_mask(tokens.size(1), device=tokens.device)"),
           "is the polarity inverted"),
    Answer("target_mask", "lets every query attend to itself, to avoid rows with no key",
           target("padding_mask(tokens, pad_idx) & causal_mask(tokens.size(1), device=tokens.device) "
                  "| torch.eye(tokens.size(1), dtype=torch.bool, device=tokens.device)"),
           "on the diagonal too"),
    Answer("target_mask", "a float mask from multiplying float versions of the masks",
           target("padding_mask(tokens, pad_idx).float() * causal_mask(tokens.size(1), device=tokens.device).float()"),
           "expected torch.bool"),
]

UNUSUAL = [
    Answer("padding_mask", "tokens.ne with None-indexing and ndim", '''
def padding_mask(tokens, pad_idx):
    if tokens.ndim != 2:
        raise ValueError("expected tokens of shape [batch, seq]")
    return tokens.ne(pad_idx)[:, None, None, :]
'''),
    Answer("padding_mask", "torch.where and view with -1", '''
def padding_mask(tokens, pad_idx):
    if len(tokens.shape) != 2:
        raise ValueError(f"tokens should be 2-D, got {tuple(tokens.shape)}")
    batch_size = tokens.shape[0]
    return torch.where(tokens == pad_idx, False, True).view(batch_size, 1, 1, -1)
'''),
    Answer("padding_mask", "brute force: a Python loop over sentences and positions", '''
def padding_mask(tokens, pad_idx):
    if tokens.dim() != 2:
        raise ValueError("tokens must be [B, T]")
    rows = []
    for sentence in tokens.tolist():
        rows.append([[[token != pad_idx for token in sentence]]])
    return torch.tensor(rows, dtype=torch.bool)
'''),
    Answer("causal_mask", "arange comparison by broadcasting", '''
def causal_mask(size, device=None):
    if size <= 0:
        raise ValueError(f"size must be >= 1, got {size}")
    i = torch.arange(size, device=device)
    return (i[None, :] <= i[:, None]).unsqueeze(0).unsqueeze(0)
'''),
    Answer("causal_mask", "torch.ones(...).tril().bool() in four dimensions", '''
def causal_mask(size, device=None):
    if size < 1:
        raise ValueError("need at least one position")
    return torch.ones(1, 1, size, size, device=device).tril().bool()
'''),
    Answer("causal_mask", "~triu(diagonal=1), built on the CPU and moved with .to(device)", '''
def causal_mask(size, device=None):
    if not size >= 1:
        raise ValueError(f"bad size {size}")
    future = torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1)
    return (~future).reshape(1, 1, size, size).to(device)
'''),
    Answer("target_mask", "bool multiplication, device passed by position", '''
def target_mask(tokens, pad_idx):
    return padding_mask(tokens, pad_idx) * causal_mask(tokens.shape[-1], tokens.device)
'''),
    Answer("target_mask", "written out without the two helpers", '''
def target_mask(tokens, pad_idx):
    keep = tokens != pad_idx
    positions = torch.arange(tokens.size(1), device=tokens.device)
    return keep[:, None, None, :] & (positions[:, None] >= positions[None, :])
'''),
    Answer("target_mask", "torch.logical_and, causal part moved with .to", '''
def target_mask(tokens, pad_idx):
    causal = causal_mask(tokens.size(1)).to(tokens.device)
    return torch.logical_and(padding_mask(tokens, pad_idx), causal)
'''),
]
