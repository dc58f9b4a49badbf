"""Realistic answers to notebook 04. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""

SPLIT = '''
def split_heads(x, n_heads):
    batch, length, d_model = x.shape
    {check}
    d_k = d_model // n_heads
    return {split}
'''
CHECK = 'if d_model % n_heads:\n        raise ValueError(f"{d_model} features cannot be split into {n_heads} heads")'

MERGE = '''
def merge_heads(x):
    batch, n_heads, length, d_k = x.shape
    return {merge}
'''

# The usual solution, with one piece swapped out at a time.
MHA = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        {check}
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        {layers}
        self.dropout = {dropout}
        self.attn = None

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_k(key), self.n_heads)
        v = split_heads(self.w_v({value}), self.n_heads)
        {attend}
        {store}
        return {output}
'''
MHA_CHECK = 'if d_model % n_heads:\n            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")'
LAYERS = ('self.w_q = nn.Linear(d_model, d_model)\n        self.w_k = nn.Linear(d_model, d_model)\n'
          '        self.w_v = nn.Linear(d_model, d_model)\n        self.w_o = nn.Linear(d_model, d_model)')
SDPA = "heads, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)"
# Attention written out by hand, as students who skip the helper do; {scale}, {fill} and {drop} vary.
INLINE = '''scores = q @ k.transpose(-2, -1) / math.sqrt({scale})
        if mask is not None:
            scores = scores.masked_fill({fill}, {value})
        weights = torch.softmax(scores, dim=-1)
        {zero}
        dropped = {drop}
        heads = dropped @ v'''


def mha(check=MHA_CHECK, layers=LAYERS, dropout="nn.Dropout(dropout)", value="value", attend=SDPA,
        store="self.attn = weights.detach()", output="self.w_o(merge_heads(heads))"):
    return MHA.format(check=check, layers=layers, dropout=dropout, value=value, attend=attend, store=store,
                      output=output)


def inline(scale="self.d_k", fill="~mask", value="torch.finfo(scores.dtype).min",
           zero="weights = weights.masked_fill(~mask, 0.0) if mask is not None else weights",
           drop="self.dropout(weights)"):
    return INLINE.format(scale=scale, fill=fill, value=value, zero=zero, drop=drop)


WRONG = [
    # split_heads
    Answer("split_heads", "views as [B, H, T, d_k] directly, without the transpose",
           SPLIT.format(check=CHECK, split="x.view(batch, n_heads, length, d_k)"), "positions are mixed into heads"),
    Answer("split_heads", "interleaves the features (view(B, T, d_k, H))",
           SPLIT.format(check=CHECK, split="x.view(batch, length, d_k, n_heads).permute(0, 3, 1, 2)"), "interleaved"),
    Answer("split_heads", "forgets the transpose: returns [B, T, H, d_k]",
           SPLIT.format(check=CHECK, split="x.view(batch, length, n_heads, d_k)"), "transpose(1, 2) to put the heads"),
    Answer("split_heads", "transposes before reshaping",
           SPLIT.format(check=CHECK, split="x.transpose(1, 2).reshape(batch, n_heads, length, d_k)"),
           "head h should hold features h*d_k:(h+1)*d_k"),
    Answer("split_heads", "swaps n_heads and d_k in the view",
           SPLIT.format(check=CHECK, split="x.view(batch, length, d_k, n_heads).transpose(1, 2)"),
           "n_heads and d_k are swapped"),
    Answer("split_heads", "detaches its result (no gradient reaches the projections)",
           SPLIT.format(check=CHECK, split="x.detach().view(batch, length, n_heads, d_k).transpose(1, 2)"),
           "is the result detached?"),
    Answer("split_heads", "never checks divisibility (view raises RuntimeError)",
           SPLIT.format(check="pass", split="x.view(batch, length, n_heads, d_k).transpose(1, 2)"),
           "should raise ValueError"),
    Answer("split_heads", "checks n_heads % d_model instead of d_model % n_heads",
           SPLIT.format(check=CHECK.replace("d_model % n_heads", "n_heads % d_model"),
                        split="x.view(batch, length, n_heads, d_k).transpose(1, 2)"),
           "should raise ValueError"),
    # merge_heads
    Answer("merge_heads", "reshapes without transposing back",
           MERGE.format(merge="x.reshape(batch, length, n_heads * d_k)"), "positions are glued together"),
    Answer("merge_heads", "uses view after the transpose (not contiguous)",
           MERGE.format(merge="x.transpose(1, 2).view(batch, length, n_heads * d_k)"), "not contiguous"),
    Answer("merge_heads", "interleaves the heads (head index last)",
           MERGE.format(merge="x.permute(0, 2, 3, 1).reshape(batch, length, n_heads * d_k)"), "interleaved"),
    Answer("merge_heads", "detaches its result",
           MERGE.format(merge="x.detach().transpose(1, 2).reshape(batch, length, n_heads * d_k)"), "is the result detached?"),
    Answer("merge_heads", "transposes but never flattens the heads",
           MERGE.format(merge="x.transpose(1, 2).contiguous()"), "the heads are not flattened"),
    # MultiHeadAttention
    Answer("MultiHeadAttention", "never applies the output projection w_o",
           mha(output="merge_heads(heads)"), "w_o is not applied"),
    Answer("MultiHeadAttention", "one Linear shared by q, k and v",
           mha(layers="self.w_q = self.w_k = self.w_v = nn.Linear(d_model, d_model)\n"
                      "        self.w_o = nn.Linear(d_model, d_model)"), "not four different layers"),
    Answer("MultiHeadAttention", "projections without bias",
           mha(layers=LAYERS.replace("d_model)", "d_model, bias=False)")), "has no bias"),
    Answer("MultiHeadAttention", "dropout on the output instead of the weights",
           mha(attend="heads, weights = scaled_dot_product_attention(q, k, v, mask)",
               output="self.dropout(self.w_o(merge_heads(heads)))"), "not on the output"),
    Answer("MultiHeadAttention", "dropout on the merged heads before w_o",
           mha(attend="heads, weights = scaled_dot_product_attention(q, k, v, mask)",
               output="self.w_o(self.dropout(merge_heads(heads)))"), "applied to the heads' outputs"),
    Answer("MultiHeadAttention", "dropout on the scores before the softmax",
           mha(attend=inline(drop="weights").replace("weights = torch.softmax(scores, dim=-1)",
                                                     "weights = torch.softmax(self.dropout(scores), dim=-1)")),
           "applied to the scores before the softmax"),
    Answer("MultiHeadAttention", "stores attn only in eval mode (stale weights after a training forward)",
           mha(store="if not self.training:\n            self.attn = weights.detach()"), "in train mode is wrong"),
    Answer("MultiHeadAttention", "F.dropout without training=self.training (drops in eval mode too)",
           mha(attend="heads, weights = scaled_dot_product_attention(q, k, v, mask, "
                      "lambda w: F.dropout(w, p=self.dropout.p))"), "switched off in eval mode"),
    Answer("MultiHeadAttention", "never stores the weights in attn",
           mha(store="pass"), "store the attention weights in self.attn"),
    Answer("MultiHeadAttention", "stores the weights after dropout",
           mha(attend=inline(), store="self.attn = dropped.detach()"), "stored after dropout"),
    Answer("MultiHeadAttention", "stores the weights averaged over the heads",
           mha(store="self.attn = weights.mean(dim=1).detach()"), "averaged over the heads"),
    Answer("MultiHeadAttention", "unsqueezes the mask as the Annotated Transformer does for its [B, 1, Tk] masks",
           mha(attend="heads, weights = scaled_dot_product_attention(q, k, v, "
                      "mask.unsqueeze(1) if mask is not None else None, self.dropout)"), "no unsqueeze",
           misleading="x must be [batch, heads, seq, d_k]"),
    Answer("MultiHeadAttention", "scales the scores by sqrt(d_model)",
           mha(attend=inline(scale="self.d_k * self.n_heads")), "divided by sqrt(d_model)"),
    Answer("MultiHeadAttention", "projects the values from key (key and value mixed up)",
           mha(value="key"), "projected from `key`"),
    Answer("MultiHeadAttention", "inverted mask polarity (fills where the mask is True)",
           mha(attend=inline(fill="mask", zero="weights = weights.masked_fill(mask, 0.0) if mask is not None else weights")),
           "inverted"),
    Answer("MultiHeadAttention", "-inf scores: a fully masked query row becomes NaN",
           mha(attend=inline(value='float("-inf")', zero="pass")), "gave NaN"),
    Answer("MultiHeadAttention", "one head over all features (never splits)",
           mha(attend="heads, weights = scaled_dot_product_attention(self.w_q(query), self.w_k(key), self.w_v(value), "
                      "mask[:, 0] if mask is not None else None, self.dropout)",
               output="self.w_o(heads)"), "all features form one head"),
    Answer("MultiHeadAttention", "divides the scores by d_k instead of sqrt(d_k)",
           mha(attend=inline(scale="self.d_k ** 2")), "(or d_k)"),
    Answer("MultiHeadAttention", "projects the keys from query (self-attention habit)",
           mha().replace("self.w_k(key)", "self.w_k(query)"), "the keys come from w_k(key)"),
    Answer("MultiHeadAttention", "fills masked scores with 0 instead of a large negative number",
           mha(attend=inline(value="0.0", zero="pass")), "0 is not enough"),
    Answer("MultiHeadAttention", "masks the weights after the softmax without renormalising",
           mha(attend=inline(fill="torch.zeros_like(mask)")), "without renormalising"),
    Answer("MultiHeadAttention", "the inverted mask again, through the helper (mask flipped before the call)",
           mha(attend="heads, weights = scaled_dot_product_attention(q, k, v, "
                      "~mask if mask is not None else None, self.dropout)"), "polarity is inverted"),
    Answer("MultiHeadAttention", "softmax over the queries (dim=-2)",
           mha(attend=inline().replace("dim=-1", "dim=-2")), "sum to 1 over the keys"),
    Answer("MultiHeadAttention", "splits into d_k heads: split_heads(x, self.d_k) instead of split_heads(x, self.n_heads)",
           mha().replace(", self.n_heads)", ", self.d_k)"), "n_heads and d_k swapped?"),
    Answer("MultiHeadAttention", "one head over all features, the mask passed on as it is",
           mha(attend="heads, weights = scaled_dot_product_attention(self.w_q(query), self.w_k(key), self.w_v(value), "
                      "mask, self.dropout)", output="self.w_o(heads)"), "the heads are never split",
           misleading="no unsqueeze"),
    Answer("MultiHeadAttention", "keeps the dropout rate, a float, and calls it as a module",
           mha(dropout="dropout", attend=inline()), "'float' object is not callable", misleading="no unsqueeze"),
    Answer("MultiHeadAttention", "keeps the dropout rate, a float (a TypeError is no shape error: no cross-attention hint)",
           mha(dropout="dropout", attend=inline()), "'float' object is not callable", misleading="cross-attention"),
    Answer("MultiHeadAttention", "never checks that d_model is divisible by n_heads",
           mha(check="pass"), "should raise ValueError"),
]

UNUSUAL = [
    Answer("split_heads", "unflatten and transpose, checking the last dimension", '''
def split_heads(x, n_heads):
    if x.size(-1) % n_heads != 0:
        raise ValueError("the model size must be a multiple of the number of heads")
    return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)
'''),
    Answer("split_heads", "chunks the features and stacks them on a new head dimension", '''
def split_heads(x, n_heads):
    if x.shape[2] % n_heads:
        raise ValueError(f"cannot split {x.shape[2]} features into {n_heads} heads")
    return torch.stack(torch.chunk(x, n_heads, dim=-1), dim=1)
'''),
    Answer("split_heads", "reshape and permute, made contiguous", '''
def split_heads(x, n_heads):
    B, T, D = x.size()
    head_dim, rest = divmod(D, n_heads)
    if rest:
        raise ValueError("D % n_heads != 0")
    return x.reshape(B, T, n_heads, head_dim).permute(0, 2, 1, 3).contiguous()
'''),
    Answer("merge_heads", "concatenates the heads along the features", '''
def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)
'''),
    Answer("merge_heads", "permute and flatten", '''
def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)
'''),
    Answer("merge_heads", "contiguous view (the Annotated Transformer's way)", '''
def merge_heads(x):
    nbatches = x.size(0)
    return x.transpose(1, 2).contiguous().view(nbatches, -1, x.size(1) * x.size(3))
'''),
    Answer("MultiHeadAttention", "attention written out with einsum, its own names, functional dropout", '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"{d_model} is not a multiple of {n_heads}")
        self.h, self.head_dim = n_heads, d_model // n_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(p=dropout)
        self.attn = None

    def forward(self, query, key, value, mask=None):
        q = self.w_q(query).unflatten(-1, (self.h, self.head_dim))      # [B, Tq, H, d]
        k = self.w_k(key).unflatten(-1, (self.h, self.head_dim))
        v = self.w_v(value).unflatten(-1, (self.h, self.head_dim))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * self.head_dim ** -0.5
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), -1e9)
        weights = scores.softmax(-1)
        if mask is not None:
            weights = weights * mask
        self.attn = weights
        dropped = F.dropout(weights, p=self.dropout.p, training=self.training)
        out = torch.einsum("bhqk,bkhd->bqhd", dropped, v).flatten(2)
        return self.w_o(out)
'''),
    Answer("MultiHeadAttention", "projections in a loop, -inf scores cleaned with nan_to_num", '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super(MultiHeadAttention, self).__init__()
        assert_ok = d_model % n_heads == 0
        if not assert_ok:
            raise ValueError("d_model must be divisible by n_heads")
        self.heads = n_heads
        for name in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=True))
        self.dropout = nn.Dropout(dropout)
        self.attn = None

    def forward(self, query, key, value, mask=None):
        q, k, v = [split_heads(layer(x), self.heads)
                   for layer, x in zip((self.w_q, self.w_k, self.w_v), (query, key, value))]
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == False, float("-inf"))
        p_attn = F.softmax(scores, dim=-1).nan_to_num(0.0)
        self.attn = p_attn.detach().clone()
        x = torch.matmul(self.dropout(p_attn), v)
        return self.w_o(merge_heads(x))
'''),
    Answer("MultiHeadAttention", "keyword call of the helper, weights kept with their graph", '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("bad head count")
        self.num_heads = n_heads
        self.w_o = nn.Linear(d_model, d_model)
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attn = None

    def forward(self, query, key, value, mask=None):
        out, self.attn = scaled_dot_product_attention(
            query=split_heads(self.w_q(query), self.num_heads),
            key=split_heads(self.w_k(key), self.num_heads),
            value=split_heads(self.w_v(value), self.num_heads),
            mask=mask, dropout=self.dropout)
        return self.w_o(merge_heads(out))
'''),
    # The tests give MultiHeadAttention stand-ins of split_heads and merge_heads (they negate some features and restore
    # them); answers that call one of them and reshape inline elsewhere are right too.
    Answer("MultiHeadAttention", "split_heads for q, k and v, the heads merged inline (the Annotated Transformer's view)",
           mha(output="self.w_o(heads.transpose(1, 2).contiguous().view(heads.size(0), -1, heads.size(1) * heads.size(3)))")),
    Answer("MultiHeadAttention", "heads cut inline, merged with merge_heads",
           mha().replace("split_heads(self.w_q(query), self.n_heads)",
                         "self.w_q(query).view(query.size(0), -1, self.n_heads, self.d_k).transpose(1, 2)")
                .replace("split_heads(self.w_k(key), self.n_heads)",
                         "self.w_k(key).view(key.size(0), -1, self.n_heads, self.d_k).transpose(1, 2)")
                .replace("split_heads(self.w_v(value), self.n_heads)",
                         "self.w_v(value).view(value.size(0), -1, self.n_heads, self.d_k).transpose(1, 2)")),
    Answer("MultiHeadAttention", "queries cut with split_heads, keys and values inline, the heads merged inline",
           mha(output="self.w_o(heads.transpose(1, 2).flatten(2))")
           .replace("split_heads(self.w_k(key), self.n_heads)", "self.w_k(key).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)")
           .replace("split_heads(self.w_v(value), self.n_heads)",
                    "self.w_v(value).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)")),
]
