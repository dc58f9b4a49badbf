"""Realistic answers to notebook 09. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""

ROPE = '''
def apply_rope(x, positions, base=10000.0):
    d = x.size(-1)
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / {denominator})
    angles = {positions}.to(torch.float64)[:, None] * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = {pairs}
    {rotation}
'''
INTERLEAVED = "x[..., 0::2], x[..., 1::2]"
ROTATE = "return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)"


def rope(denominator="d", positions="positions", pairs=INTERLEAVED, rotation=ROTATE):
    return ROPE.format(denominator=denominator, positions=positions, pairs=pairs, rotation=rotation)


ATTENTION = '''
class CausalSelfAttention(MultiHeadAttention):
    def forward(self, x, cache=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        {before_split}
        q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))
        past = cache["k"].size(2) if cache is not None and "k" in cache else 0
        positions = torch.arange({start}, {start} + x.size(1))
        {rotate}
        new_k, new_v = k, v
        if cache is not None and past:
            k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
        {store}
        {attend}
        return self.w_o(merge_heads(out))
'''
ROTATE_QK = "q, k = apply_rope(q, positions), apply_rope(k, positions)"
STORE = 'if cache is not None:\n            cache["k"], cache["v"] = k, v'
MASK = "mask = torch.ones(x.size(1), k.size(2), dtype=torch.bool).tril(diagonal=past)"
ATTEND = MASK + ("\n        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, "
                 "dropout_p=self.dropout.p if self.training else 0.0)")


def attention(before_split="", start="past", rotate=ROTATE_QK, store=STORE, attend=ATTEND):
    return ATTENTION.format(before_split=before_split, start=start, rotate=rotate, store=store, attend=attend)


MODEL = '''
class GPTBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cache=None):
        {block}


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        {init}
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([GPTBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.norm = LayerNorm(d_model)
        {extra}

    def forward(self, tokens, cache=None):
        h = {embedded}
        for i, block in enumerate(self.blocks):
            h = block(h, {block_cache})
        return {output}
'''
PRE_LN = ("x = x + self.dropout(self.attn(self.norm1(x), cache=cache))\n"
          "        return x + self.dropout(self.feed_forward(self.norm2(x)))")


INIT = "nn.init.normal_(self.embed.weight, std=0.02)"


def model(block=PRE_LN, extra="", embedded="self.dropout(self.embed(tokens))", init=INIT,
          block_cache="None if cache is None else cache.setdefault(i, {})", output="self.norm(h) @ self.embed.weight.T"):
    return MODEL.format(block=block, extra=extra, embedded=embedded, init=init, block_cache=block_cache, output=output)


LOSS = '''
def lm_loss(logits, tokens, loss_mask=None):
    log_probs = F.log_softmax(logits{logits}.float(), dim=-1)
    nll = -log_probs.gather(-1, tokens{targets}.unsqueeze(-1)).squeeze(-1)
    if loss_mask is None:
        return nll.mean()
    counted = loss_mask{mask}
    {reduce}
'''
MEAN = "return nll[counted].mean()"


def loss(logits="[:, :-1]", targets="[:, 1:]", mask="[:, 1:]", reduce=MEAN):
    return LOSS.format(logits=logits, targets=targets, mask=mask, reduce=reduce)


GROUPS = '''
def adamw_param_groups(model, weight_decay):
    {choose}
    return [{{"params": decay, "weight_decay": weight_decay}}, {second}]
'''
REST = '{"params": [p for p in model.parameters() if all(p is not q for q in decay)], "weight_decay": 0.0}'


def groups(choose, second=REST):
    return GROUPS.format(choose=choose, second=second)


SCHEDULE = '''
def warmup_cosine_lr(step, peak_lr, warmup_steps, total_steps, min_lr=0.0):
    if not 0 <= warmup_steps < total_steps:
        raise ValueError("need 0 <= warmup_steps < total_steps")
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    progress = {progress}
    return {value}
'''
PROGRESS = "min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))"
VALUE = "min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))"


def schedule(progress=PROGRESS, value=VALUE):
    return SCHEDULE.format(progress=progress, value=value)


SAMPLE = '''
def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    {greedy}
    {temperature}
    if top_k is not None:
        kth = logits.topk({kth}, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        probs = logits.softmax(dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        {nucleus}
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    probs = {probs}
    return torch.multinomial(probs, 1, {generator}).squeeze(-1)
'''
GREEDY = "if temperature == 0:\n        return logits.argmax(dim=-1)"
DIVIDE = "logits = logits.float() / temperature"
NUCLEUS = "drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p"


def sample(greedy=GREEDY, temperature=DIVIDE, nucleus=NUCLEUS, probs="logits.softmax(dim=-1)",
           generator="generator=generator", kth="min(top_k, logits.size(-1))"):
    return SAMPLE.format(greedy=greedy, temperature=temperature, nucleus=nucleus, probs=probs, generator=generator, kth=kth)


SAMPLE_TOP_P_FIRST = '''
def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_p is not None:
        sorted_probs, order = logits.softmax(dim=-1).sort(dim=-1, descending=True)
        drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)
'''


GENERATE = '''
def generate(model, prompt, max_new_tokens, cache=True, choose=None):
    choose = choose or (lambda logits: logits.argmax(dim=-1))
    kv = {{}} if cache else None
    tokens, steps = prompt, []
    with torch.no_grad():
        fed = prompt
        for _ in range(max_new_tokens):
            {call}
            steps.append(logits)
            tokens = torch.cat([tokens, choose(logits)[:, None]], dim=1)
            {next_fed}
    return tokens, torch.stack(steps, dim=1)
'''
CALL = "logits = (model(fed, cache=kv) if cache else model(tokens))[:, -1]"


def generation(call=CALL, next_fed="fed = tokens[:, -1:]"):
    return GENERATE.format(call=call, next_fed=next_fed)


GENERATE_AFTER_UPDATE = '''
def generate(model, prompt, max_new_tokens, cache=True, choose=None):
    choose = choose or (lambda logits: logits.argmax(dim=-1))
    kv = {} if cache else None
    tokens, steps = prompt, []
    with torch.no_grad():
        logits = model(prompt, cache=kv)[:, -1]
        for _ in range(max_new_tokens):
            tokens = torch.cat([tokens, choose(logits)[:, None]], dim=1)
            logits = (model(tokens[:, -1:], cache=kv) if cache else model(tokens))[:, -1]
            steps.append(logits)
    return tokens, torch.stack(steps, dim=1)
'''


WRONG = [
    # apply_rope
    Answer("apply_rope", "pairs x[i] with x[i + d/2] (the half-split layout of GPT-NeoX)",
           rope(pairs="x[..., :d // 2], x[..., d // 2:]",
                rotation="return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)"), "the half-split layout"),
    Answer("apply_rope", "frequencies base^(-i/d): the exponent counts pairs, not features",
           rope(denominator="(2 * d)"), "frequencies base^(-i/d)"),
    Answer("apply_rope", "rotates the wrong way", rope(
        rotation="return torch.stack([a * cos + b * sin, -a * sin + b * cos], dim=-1).flatten(-2)"),
        "a rotation the wrong way"),
    Answer("apply_rope", "ignores the positions argument (0, 1, ..., T-1)", rope(positions="torch.arange(x.size(-2))"),
           "whatever `positions` says"),
    Answer("apply_rope", "angles in float32", rope(denominator="d").replace("torch.float64", "torch.float32"), "in float64"),
    Answer("apply_rope", "works on [B, H, T, d] only", '''
def apply_rope(x, positions, base=10000.0):
    batch, heads, length, d = x.shape
    angles = positions.double()[:, None] * base ** (-torch.arange(0, d, 2).double() / d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    pairs = x.reshape(batch, heads, length, d // 2, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).reshape(batch, heads, length, d)
''', "any number of leading dimensions"),
    Answer("apply_rope", "rotates x in place", '''
def apply_rope(x, positions, base=10000.0):
    d = x.size(-1)
    angles = positions.double()[:, None] * base ** (-torch.arange(0, d, 2).double() / d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = a * cos - b * sin
    x[..., 1::2] = a * sin + b * cos
    return x
''', "changed x in place"),
    # CausalSelfAttention
    Answer("CausalSelfAttention", "RoPE with d_model frequencies (rotated before the heads are split)", attention(
        before_split="n = x.size(1)\n        q, k = apply_rope(q, torch.arange(n)), apply_rope(k, torch.arange(n))",
        rotate="pass"), "frequencies over d_model"),
    Answer("CausalSelfAttention", "rotates the values too",
           attention(rotate=ROTATE_QK + "\n        v = apply_rope(v, positions)"), "the values rotated too"),
    Answer("CausalSelfAttention", "no causal mask",
           attention(attend="out = F.scaled_dot_product_attention(q, k, v)"), "no causal mask"),
    Answer("CausalSelfAttention", "positions restart at 0 with every call (off by the cache's length)",
           attention(start="0"), "positions that restart at 0"),
    Answer("CausalSelfAttention", "is_causal=True with the cache (the mask aligned top-left)",
           attention(attend="out = F.scaled_dot_product_attention(q, k, v, is_causal=True, "
                                  "dropout_p=self.dropout.p if self.training else 0.0)"), "aligned top-left"),
    Answer("CausalSelfAttention", "attends before appending: the new tokens do not see their own keys", '''
class CausalSelfAttention(MultiHeadAttention):
    def forward(self, x, cache=None):
        q, k, v = (split_heads(t, self.n_heads) for t in (self.w_q(x), self.w_k(x), self.w_v(x)))
        past = cache["k"].size(2) if cache is not None and "k" in cache else 0
        positions = torch.arange(past, past + x.size(1))
        q, k = apply_rope(q, positions), apply_rope(k, positions)
        if past:   # attend to what the cache holds, then add the new keys and values to it
            out = F.scaled_dot_product_attention(q, cache["k"], cache["v"], dropout_p=self.dropout.p if self.training else 0.0)
            cache["k"], cache["v"] = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
        else:
            mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout.p if self.training else 0.0)
            if cache is not None:
                cache["k"], cache["v"] = k, v
        return self.w_o(merge_heads(out))
''', "do not attend to their own keys"),
    Answer("CausalSelfAttention", "never stores anything in the cache", attention(store="pass"),
           "the cache is not used"),
    Answer("CausalSelfAttention", "stores only the last call's keys and values (the cache overwritten)",
           attention(store='if cache is not None:\n            cache["k"], cache["v"] = new_k, new_v'), "overwritten"),
    Answer("CausalSelfAttention", "no dropout on the attention weights in training mode",
           attention(attend=MASK + "\n        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"),
           "drops no attention weight"),
    # GPT
    Answer("GPT", "Post-LN blocks", model(block=(
        "x = self.norm1(x + self.dropout(self.attn(x, cache=cache)))\n"
        "        return self.norm2(x + self.dropout(self.feed_forward(x)))")), "Post-LN blocks"),
    Answer("GPT", "no final LayerNorm", model(output="h @ self.embed.weight.T"), "no final LayerNorm before"),
    Answer("GPT", "an output layer of its own (untied)", model(extra="self.head = nn.Linear(d_model, vocab_size)",
                                                               output="self.head(self.norm(h))"),
           "its own output layer"),
    Answer("GPT", "scales the token vectors by sqrt(d_model) as notebook 01 does",
           model(embedded="self.dropout(self.embed(tokens) * math.sqrt(self.embed.embedding_dim))"),
           "multiplied by sqrt(d_model)"),
    Answer("GPT", "hands the same cache dict to every block", model(block_cache="cache"), "the same cache dict"),
    Answer("GPT", "its block class named Block", model().replace("GPTBlock", "Block"), "GPTBlock"),
    Answer("GPT", "keeps nn.Embedding's initialisation (standard deviation 1)", model(init="pass"),
           "standard deviation"),
    Answer("GPT", "no dropout after the embedding", model(embedded="self.embed(tokens)"),
           "no nn.Dropout to the token vectors", misleading="no nn.Dropout to block"),
    Answer("GPT", "no dropout on the sub-layers' outputs", model(block=(
        "x = x + self.attn(self.norm1(x), cache=cache)\n        return x + self.feed_forward(self.norm2(x))")),
        "no nn.Dropout to block 0's attention output", misleading="no nn.Dropout to the token vectors"),
    # lm_loss
    Answer("lm_loss", "no shift: position t scored against token t", loss(logits="", targets="", mask=""),
           "no shift"),
    Answer("lm_loss", "the mask read one position early", loss(mask="[:, :-1]"), "the mask read one position early"),
    Answer("lm_loss", "the loss over the prompt's tokens too (the mask ignored)", loss(mask="[:, 1:] | True"),
           "the prompt's included"),
    Answer("lm_loss", "a loss of shape [1]", loss(reduce="return nll[counted].mean().reshape(1)"), "0-d tensor"),
    Answer("lm_loss", "a mean of per-sequence means", loss(
        reduce="return torch.stack([row[keep].mean() for row, keep in zip(nll, counted) if keep.any()]).mean()"),
        "the mean of each sequence's mean"),
    # adamw_param_groups
    Answer("adamw_param_groups", "decays every weight but the embedding's, LayerNorm's gain included", groups(
        "embedded = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]\n"
        "    decay = [p for n, p in model.named_parameters() if n.endswith('weight') and all(p is not e for e in embedded)]"),
        "nn.LayerNorm's weight"),
    Answer("adamw_param_groups", "decays every matrix, the embedding included (nanoGPT's rule)",
           groups("decay = [p for p in model.parameters() if p.dim() >= 2]"), "the embedding"),
    Answer("adamw_param_groups", "decays every matrix but the embeddings' (nn.Linear or not)", groups(
        "embedded = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]\n"
        "    decay = [p for p in model.parameters() if p.dim() >= 2 and all(p is not e for e in embedded)]"),
        "only the weight matrices of nn.Linear layers"),
    Answer("adamw_param_groups", "decays the Linear layers' biases too", groups(
        "linear = [m for m in model.modules() if isinstance(m, nn.Linear)]\n"
        "    embedded = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]\n"
        "    decay = [p for m in linear for p in m.parameters() if all(p is not e for e in embedded)]"), "a bias"),
    Answer("adamw_param_groups", "lists the tied weight in both groups", groups(
        "embedded = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]\n"
        "    decay = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]",
        second='{"params": embedded + [p for p in model.parameters() if all(p is not q for q in decay)], '
               '"weight_decay": 0.0}'), "twice"),
    Answer("adamw_param_groups", "leaves weight_decay out of the second group (AdamW's default 0.01)", groups(
        "embedded = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]\n"
        "    decay = [m.weight for m in model.modules() if isinstance(m, nn.Linear) and all(m.weight is not e for e in embedded)]",
        second='{"params": [p for p in model.parameters() if all(p is not q for q in decay)]}'),
        "a group without 'weight_decay'"),
    # warmup_cosine_lr
    Answer("warmup_cosine_lr", "cos(pi * progress) without (1 + cos) / 2",
           schedule(value="min_lr + (peak_lr - min_lr) * math.cos(math.pi * progress)"), "without (1 + cos) / 2"),
    Answer("warmup_cosine_lr", "the cosine's progress counted from step 0",
           schedule(progress="min(1.0, step / total_steps)"), "counted from step 0"),
    Answer("warmup_cosine_lr", "decays to 0, ignoring min_lr",
           schedule(value="peak_lr * 0.5 * (1 + math.cos(math.pi * progress))"), "a decay to 0"),
    Answer("warmup_cosine_lr", "no floor after total_steps",
           schedule(progress="(step - warmup_steps) / (total_steps - warmup_steps)"), "no floor after total_steps"),
    Answer("warmup_cosine_lr", "the cosine reaches its floor one step early (total_steps - 1 is taken as the last)",
           schedule(progress="min(1.0, (step - warmup_steps) / (total_steps - 1 - warmup_steps))"), "off by one step"),
    # sample_next
    Answer("sample_next", "applies the temperature to the probabilities after the softmax", sample(
        temperature="pass", probs="(logits.softmax(dim=-1) / temperature)"), "after the softmax"),
    Answer("sample_next", "top-p drops the token that crosses p",
           sample(nucleus="drop = sorted_probs.cumsum(dim=-1) > top_p\n        drop[:, 0] = False"),
           "drops the token whose probability crosses p"),
    Answer("sample_next", "top-p before the temperature", sample(
        temperature="pass", probs="(logits / temperature).softmax(dim=-1)"), "before the temperature"),
    Answer("sample_next", "top-p before top-k", SAMPLE_TOP_P_FIRST, "before top-k", misleading="before the temperature"),
    Answer("sample_next", "top-k larger than the number of tokens fails in topk", sample(kth="top_k"), "clamp it"),
    Answer("sample_next", "divides by a temperature of 0", sample(greedy="pass"), "temperature 0 means the argmax"),
    Answer("sample_next", "ignores the generator", sample(generator="replacement=False"), "seeded alike"),
    # generate
    Answer("generate", "feeds the whole sequence again with the cache",
           generation(next_fed="fed = tokens"), "which already holds"),
    Answer("generate", "a new cache dict at every step",
           generation(call="logits = (model(fed, cache={} if cache else None) if cache else model(tokens))[:, -1]"),
           "got a new cache dict"),
    Answer("generate", "feeds the token before the new one (off by one)",
           generation(next_fed="fed = tokens[:, -2:-1]"), "feed the newest token"),
    Answer("generate", "keeps the logits of the first position", generation(
        call="logits = (model(fed, cache=kv) if cache else model(tokens))[:, 0]"), "at position 0"),
    Answer("generate", "keeps each step's logits after appending its token (the next step's)", GENERATE_AFTER_UPDATE,
           "after its token was appended"),
    Answer("generate", "puts the model in eval mode itself", generation(
        call="logits = (model.eval()(fed, cache=kv) if cache else model.eval()(tokens))[:, -1]"), "changed the model's mode"),
    Answer("generate", "runs the model with gradients on", GENERATE.replace("with torch.no_grad():", "if True:").format(
        call=CALL, next_fed="fed = tokens[:, -1:]"), "torch.no_grad()"),
    Answer("generate", "gives choose the probabilities", GENERATE.replace(
        "choose(logits)", "choose(logits.softmax(dim=-1))").format(call=CALL, next_fed="fed = tokens[:, -1:]"),
        "the probabilities"),
]


UNUSUAL = [
    Answer("apply_rope", "complex numbers: each pair times e^(i p w)", '''
def apply_rope(x, positions, base=10000.0):
    d = x.size(-1)
    w = base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * w)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * turn).flatten(-2).to(x.dtype)
'''),
    Answer("CausalSelfAttention", "its own module; caches the unrotated keys and rotates them all again, notebook 02's attention", '''
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cache=None):
        raw_k, v = split_heads(self.w_k(x), self.n_heads), split_heads(self.w_v(x), self.n_heads)
        if cache is not None and cache:
            raw_k, v = torch.cat([cache["raw_k"], raw_k], 2), torch.cat([cache["v"], v], 2)
        if cache is not None:
            cache["raw_k"], cache["v"] = raw_k, v
        total, new = raw_k.size(2), x.size(1)
        k = apply_rope(raw_k, torch.arange(total))
        q = apply_rope(split_heads(self.w_q(x), self.n_heads), torch.arange(total - new, total))
        allowed = torch.arange(total)[None, :] <= torch.arange(total - new, total)[:, None]
        out, _ = scaled_dot_product_attention(q, k, v, allowed, self.dropout)
        return self.w_o(merge_heads(out))
'''),
    Answer("CausalSelfAttention", "RoPE written out inline with complex numbers (no call of apply_rope), its own "
           "count of the cached tokens", '''
class CausalSelfAttention(MultiHeadAttention):
    def forward(self, x, cache=None):
        q, k, v = (split_heads(t, self.n_heads) for t in (self.w_q(x), self.w_k(x), self.w_v(x)))
        past = 0 if cache is None else cache.get("length", 0)
        d = q.size(-1)
        angle = torch.arange(past, past + x.size(1), dtype=torch.float64)[:, None] * \
            10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        turn = torch.polar(torch.ones_like(angle), angle)

        def rotate(t):
            pairs = torch.view_as_complex(t.double().reshape(*t.shape[:-1], d // 2, 2).contiguous())
            return torch.view_as_real(pairs * turn).flatten(-2).to(t.dtype)
        q, k = rotate(q), rotate(k)
        if cache is not None:
            if past:
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache.update(k=k, v=v, length=past + x.size(1))
        mask = torch.ones(x.size(1), k.size(2), dtype=torch.bool).tril(diagonal=past)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout.p if self.training else 0.0)
        return self.w_o(merge_heads(out))
'''),
    Answer("GPT", "F.linear with the embedding, blocks appended in a loop, the block's cache by keyword", '''
class GPTBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout=dropout)
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=dropout)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, cache=None):
        attended = self.attn(self.norm1(x), cache=cache)
        x = torch.add(x, self.dropout(attended))
        transformed = self.feed_forward(self.norm2(x))
        return torch.add(x, self.dropout(transformed))


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        with torch.no_grad():
            self.embed.weight.normal_(0.0, 0.02)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList()
        for _ in range(n_layers):
            self.blocks.append(GPTBlock(d_model, n_heads, d_ff, dropout))
        self.norm = LayerNorm(d_model)

    def forward(self, tokens, cache=None):
        states = self.dropout(self.embed(tokens))
        for index, block in enumerate(self.blocks):
            own = None
            if cache is not None:
                if index not in cache:
                    cache[index] = {}
                own = cache[index]
            states = block(states, cache=own)
        return F.linear(self.norm(states), self.embed.weight)
'''),
    Answer("lm_loss", "F.cross_entropy with the uncounted targets set to ignore_index", '''
def lm_loss(logits, tokens, loss_mask=None):
    targets = tokens[:, 1:].clone()
    if loss_mask is not None:
        targets[~loss_mask[:, 1:]] = -100
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-100)
'''),
    Answer("adamw_param_groups", "named_modules, parameters without recursion, a set of ids", '''
def adamw_param_groups(model, weight_decay):
    embedding_ids = {id(m.weight) for _, m in model.named_modules() if isinstance(m, nn.Embedding)}
    decay_ids = set()
    for _, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if isinstance(module, nn.Linear) and name == "weight" and id(p) not in embedding_ids:
                decay_ids.add(id(p))
    params = list(model.parameters())
    return [dict(params=[p for p in params if id(p) in decay_ids], weight_decay=weight_decay),
            dict(params=[p for p in params if id(p) not in decay_ids], weight_decay=0.0)]
'''),
    Answer("warmup_cosine_lr", "cos² of half the angle, and max/min for the clamp", '''
def warmup_cosine_lr(step, peak_lr, warmup_steps, total_steps, min_lr=0.0):
    if warmup_steps < 0 or warmup_steps >= total_steps:
        raise ValueError("warmup_steps must be in [0, total_steps)")
    if step < warmup_steps:
        return step / warmup_steps * peak_lr
    progress = max(0.0, min(1.0, (step - warmup_steps) / (total_steps - warmup_steps)))
    return min_lr + (peak_lr - min_lr) * math.cos(math.pi * progress / 2) ** 2
'''),
    Answer("sample_next", "the inverse of the cumulative distribution with torch.rand, filters by sorting", '''
def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    if top_k is not None:
        sorted_probs[:, top_k:] = 0
        sorted_probs = sorted_probs / sorted_probs.sum(-1, keepdim=True)
    if top_p is not None:
        before = torch.cumsum(sorted_probs, -1) - sorted_probs
        sorted_probs = torch.where(before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
        sorted_probs = sorted_probs / sorted_probs.sum(-1, keepdim=True)
    u = torch.rand(logits.size(0), 1, generator=generator, dtype=torch.float64)
    index = (torch.cumsum(sorted_probs, -1) < u).sum(-1).clamp(max=logits.size(-1) - 1)
    return order.gather(-1, index[:, None]).squeeze(-1)
'''),
    Answer("generate", "a while loop, inference mode, one more call than needed", '''
def generate(model, prompt, max_new_tokens, cache=True, choose=None):
    pick = choose if choose is not None else (lambda scores: scores.max(dim=-1).indices)
    memory = dict() if cache else None
    out, history = prompt.clone(), []
    with torch.inference_mode():
        logits = model(prompt, cache=memory)[:, -1, :] if cache else model(prompt)[:, -1, :]
        while len(history) < max_new_tokens:
            history.append(logits)
            token = pick(logits).reshape(-1, 1)
            out = torch.cat((out, token), dim=1)
            logits = model(token, cache=memory)[:, -1, :] if cache else model(out)[:, -1, :]
    return out, torch.stack(history, dim=1)
'''),
]
