"""Realistic answers to notebook 01. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""

TOKEN_EMBEDDING = '''
class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = {embedding}
        self.d_model = d_model

    def forward(self, tokens):
        return {forward}
'''

POSITIONAL_ENCODING = '''
def positional_encoding(max_len, d_model):
    if d_model % 2 or max_len <= 0 or d_model <= 0:
        raise ValueError(f"bad sizes {{max_len}}, {{d_model}}")
    position = torch.arange(max_len).unsqueeze(1).float()
    i = torch.arange(0, d_model, 2).float()
    angle = position / 10000 ** ({exponent} / d_model)
    pe = torch.zeros(max_len, d_model)
    {fill}
    return pe
'''
INTERLEAVED = "pe[:, 0::2] = torch.sin(angle)\n    pe[:, 1::2] = torch.cos(angle)"

MODULE = '''
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout({p})
        {store}

    def forward(self, x):
        {check}
        return {forward}
'''
BUFFER = 'self.register_buffer("pe", positional_encoding(max_len, d_model))'
CHECK = 'if x.size(1) > self.pe.size(0): raise ValueError("sequence longer than max_len")'


def token_embedding(embedding="nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)",
                    forward="self.embedding(tokens) * math.sqrt(self.d_model)"):
    return TOKEN_EMBEDDING.format(embedding=embedding, forward=forward)


def table(exponent="i", fill=INTERLEAVED):
    return POSITIONAL_ENCODING.format(exponent=exponent, fill=fill)


def module(p="dropout", store=BUFFER, check=CHECK, forward="self.dropout(x + self.pe[:x.size(1)])"):
    return MODULE.format(p=p, store=store, check=check, forward=forward)


WRONG = [
    # TokenEmbedding
    Answer("TokenEmbedding", "forgets the sqrt(d_model) scale",
           token_embedding(forward="self.embedding(tokens)"), "(not multiplied by sqrt(d_model))"),
    Answer("TokenEmbedding", "divides by sqrt(d_model)",
           token_embedding(forward="self.embedding(tokens) / math.sqrt(self.d_model)"), "divided by sqrt(d_model) instead"),
    Answer("TokenEmbedding", "drops padding_idx",
           token_embedding(embedding="nn.Embedding(vocab_size, d_model)"), "pass padding_idx"),
    Answer("TokenEmbedding", "swaps the nn.Embedding sizes",
           token_embedding(embedding="nn.Embedding(d_model, vocab_size, padding_idx=padding_idx)"), "expected [10, 4]"),
    Answer("TokenEmbedding", "looks the rows up in a detached copy of the table",
           token_embedding(forward="F.embedding(tokens, self.embedding.weight.detach(), self.embedding.padding_idx) "
                                   "* math.sqrt(self.d_model)"), "no gradient reached embedding.weight"),
    Answer("TokenEmbedding", "scales by sqrt(vocab_size)",
           token_embedding(forward="self.embedding(tokens) * math.sqrt(self.embedding.num_embeddings)"),
           "embedding.weight[9] * 3.162"),
    # positional_encoding
    Answer("positional_encoding", "doubles the exponent", table(exponent="2 * i"), "exponent is doubled"),
    Answer("positional_encoding", "swaps sin and cos",
           table(fill="pe[:, 0::2] = torch.cos(angle)\n    pe[:, 1::2] = torch.sin(angle)"), "sin and cos are swapped"),
    Answer("positional_encoding", "concatenates the sin and cos halves",
           table(fill="pe = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)"), "concatenated"),
    Answer("positional_encoding", "keeps a batch dimension (the Annotated Transformer's buffer)",
           table(fill=INTERLEAVED + "\n    pe = pe.unsqueeze(0)"), "a batch dimension too many"),
    Answer("positional_encoding", "returns float64",
           table(fill=INTERLEAVED + "\n    pe = pe.double()"), "expected torch.float32"),
    Answer("positional_encoding", "never checks its arguments",
           table().replace('raise ValueError(f"bad sizes {max_len}, {d_model}")', "pass"), "should raise ValueError"),
    Answer("positional_encoding", "checks d_model but not max_len (a table of 0 positions)",
           table().replace("max_len <= 0 or ", ""), "raise ValueError when max_len <= 0"),
    # PositionalEncoding
    Answer("PositionalEncoding", "stores pe as a trainable parameter",
           module(store='self.pe = nn.Parameter(positional_encoding(max_len, d_model))'), "register it as a buffer"),
    Answer("PositionalEncoding", "passes the sizes to positional_encoding in the wrong order",
           module(store='self.register_buffer("pe", positional_encoding(d_model, max_len))'), "dimensions transposed"),
    Answer("PositionalEncoding", "keeps a table of zeros instead of the encoding",
           module(store='self.register_buffer("pe", torch.zeros(max_len, d_model))'), "should hold positional_encoding("),
    Answer("PositionalEncoding", "never applies dropout", module(forward="x + self.pe[:x.size(1)]"), "dropout is never applied"),
    Answer("PositionalEncoding", "applies dropout to x before adding the encoding",
           module(forward="self.dropout(x) + self.pe[:x.size(1)]"), "before the encoding is added"),
    Answer("PositionalEncoding", "uses F.dropout without training=self.training",
           module(forward="F.dropout(x + self.pe[:x.size(1)], p=self.dropout.p)"), "dropout must be off in eval mode"),
    Answer("PositionalEncoding", "does not check the length", module(check="pass"), "should raise ValueError"),
    Answer("PositionalEncoding", "keeps a batch dimension in the buffer",
           module(store='self.register_buffer("pe", positional_encoding(max_len, d_model).unsqueeze(0))',
                  forward="self.dropout(x + self.pe[:, :x.size(1)])",
                  check='if x.size(1) > self.pe.size(1): raise ValueError("too long")'),
           "a batch dimension too many"),
    Answer("PositionalEncoding", "hard-codes the dropout probability", module(p="0.1"), "pass the argument on"),
    Answer("PositionalEncoding", "scales x by sqrt(d_model) a second time",
           module(forward="self.dropout(x * math.sqrt(x.size(-1)) + self.pe[:x.size(1)])"), "TokenEmbedding already scales"),
]

UNUSUAL = [
    Answer("TokenEmbedding", "keeps the scale as a tensor buffer and reads the size from the table", '''
class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings=vocab_size, embedding_dim=d_model, padding_idx=padding_idx)

    def forward(self, tokens):
        return self.embedding(tokens) * self.embedding.embedding_dim ** 0.5
'''),
    Answer("positional_encoding", "float32 through exp and log (the Annotated Transformer's way)", '''
def positional_encoding(max_len, d_model):
    if d_model <= 0 or max_len <= 0 or d_model % 2 != 0:
        raise ValueError(f"need a positive even d_model and a positive max_len, got {max_len}, {d_model}")
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
'''),
    Answer("positional_encoding", "Python loops over positions and pairs", '''
def positional_encoding(max_len, d_model):
    if not (max_len > 0 and d_model > 0 and d_model % 2 == 0):
        raise ValueError("max_len must be positive and d_model positive and even")
    rows = []
    for pos in range(max_len):
        row = []
        for i in range(d_model // 2):
            angle = pos / math.pow(10000, 2 * i / d_model)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)
'''),
    Answer("PositionalEncoding", "functional dropout with the training flag, table built inline", '''
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pos = torch.arange(max_len, dtype=torch.float64)[:, None]
        freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        table = torch.stack([torch.sin(pos * freq), torch.cos(pos * freq)], dim=-1).flatten(1)
        self.register_buffer("pe", table.float(), persistent=True)

    def forward(self, x):
        T = x.shape[1]
        if T > len(self.pe):
            raise ValueError(f"got {T} positions but max_len is {len(self.pe)}")
        return F.dropout(x + self.pe[:T, :].unsqueeze(0), p=self.dropout.p, training=self.training)
'''),
]
