"""Realistic answers to notebook 06. ``Answer`` is provided by tests/support/notebooks.py.

WRONG: mistakes students make; each must lose points in its own exercise, and the feedback must
contain ``message``. UNUSUAL: correct answers written differently; each must keep full marks.
"""


def fill(template, **parts):
    """The template with each <<name>> replaced by parts[name] (plain replacement: the code keeps its braces)."""
    for name, text in parts.items():
        template = template.replace(f"<<{name}>>", text)
    return template


# ---------------------------------------------------------------------------------------------- EncoderLayer
ENCODER_LAYER = '''
class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, <<attn_dropout>>)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, src_mask=None):
        if self.norm_first:
<<pre>>
<<post>>
'''
ENC_PRE = '''            y = self.norm1(x)
            x = x + self.dropout(self.self_attn(y, y, y, src_mask))
            return x + self.dropout(self.feed_forward(self.norm2(x)))'''
ENC_POST = '''        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, src_mask)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))'''


def encoder_layer(attn_dropout="dropout", pre=ENC_PRE, post=ENC_POST):
    return fill(ENCODER_LAYER, attn_dropout=attn_dropout, pre=pre, post=post)


# ---------------------------------------------------------------------------------------------- DecoderLayer
DECODER_LAYER = '''
class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if self.norm_first:
<<pre>>
<<post>>
'''
DEC_PRE = '''            y = self.norm1(x)
            x = x + self.dropout(self.self_attn(y, y, y, tgt_mask))
            x = x + self.dropout(self.cross_attn(self.norm2(x), memory, memory, src_mask))
            return x + self.dropout(self.feed_forward(self.norm3(x)))'''
DEC_POST = '''        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + self.dropout(self.feed_forward(x)))'''


def decoder_layer(pre=DEC_PRE, post=DEC_POST):
    return fill(DECODER_LAYER, pre=pre, post=post)


# ---------------------------------------------------------------------------------------------- stacks
STACK = '''
class <<name>>(nn.Module):
    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = <<layers>>
        self.norm = <<norm>>

    def forward(<<signature>>):
        for layer in self.layers:
            x = <<call>>
        <<finish>>
'''
ENCODER_PARTS = dict(name="Encoder", signature="self, x, src_mask=None", call="layer(x, src_mask)",
                     layers="nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers)])")
DECODER_PARTS = dict(name="Decoder", signature="self, x, memory, src_mask=None, tgt_mask=None",
                     call="layer(x, memory, src_mask, tgt_mask)",
                     layers="nn.ModuleList([DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers)])")
FINAL_NORM = "LayerNorm(d_model) if norm_first else None"
FINISH = "return x if self.norm is None else self.norm(x)"


def encoder(**changes):
    return fill(STACK, **{**ENCODER_PARTS, "norm": FINAL_NORM, "finish": FINISH, **changes})


def decoder(**changes):
    return fill(STACK, **{**DECODER_PARTS, "norm": FINAL_NORM, "finish": FINISH, **changes})


# ---------------------------------------------------------------------------------------------- Transformer
TRANSFORMER = '''
class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, num_encoder_layers=6,
                 num_decoder_layers=6, d_ff=2048, dropout=0.1, max_len=5000, pad_idx=0, norm_first=False):
        super().__init__()
        self.d_model = d_model
<<embeddings>>
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_encoder_layers, d_model, n_heads, d_ff, dropout, norm_first)
        self.decoder = Decoder(num_decoder_layers, d_model, n_heads, d_ff, dropout, norm_first)
<<generator_and_init>>
        self.pad_idx = pad_idx

    def encode(self, src, src_mask):
        return self.encoder(<<src_in>>, src_mask)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        return self.decoder(<<tgt_in>>, memory, src_mask, tgt_mask)

    def forward(self, src, tgt):
        src_mask = <<src_mask>>
        tgt_mask = <<tgt_mask>>
        memory = self.encode(src, src_mask)
        return <<output>>
'''
EMBEDDINGS = '''        self.src_embed = TokenEmbedding(src_vocab_size, d_model, padding_idx=pad_idx)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model, padding_idx=pad_idx)'''
XAVIER = '''        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)'''
GENERATOR = "        self.generator = nn.Linear(d_model, tgt_vocab_size)"
TRANSFORMER_PARTS = dict(
    embeddings=EMBEDDINGS, generator_and_init=GENERATOR + "\n" + XAVIER,
    src_in="self.pos_encoding(self.src_embed(src))", tgt_in="self.pos_encoding(self.tgt_embed(tgt))",
    src_mask="padding_mask(src, self.pad_idx)", tgt_mask="target_mask(tgt, self.pad_idx)",
    output="self.generator(self.decode(tgt, memory, src_mask, tgt_mask))")


def transformer(**changes):
    return fill(TRANSFORMER, **{**TRANSFORMER_PARTS, **changes})


WRONG = [
    # EncoderLayer
    Answer("EncoderLayer", "writes Post-LN as Pre-LN (ignores norm_first=False)",
           encoder_layer(post=ENC_PRE.replace("            ", "        ")), "that is Pre-LN"),
    Answer("EncoderLayer", "writes Pre-LN as Post-LN (ignores norm_first=True)",
           encoder_layer(pre=ENC_POST.replace("        ", "            ")), "is this Post-LN"),
    Answer("EncoderLayer", "forgets the residual connections",
           encoder_layer(pre='''            y = self.norm1(x)
            x = self.dropout(self.self_attn(y, y, y, src_mask))
            return self.dropout(self.feed_forward(self.norm2(x)))''',
                         post='''        x = self.norm1(self.dropout(self.self_attn(x, x, x, src_mask)))
        return self.norm2(self.dropout(self.feed_forward(x)))'''), "residual connection"),
    Answer("EncoderLayer", "applies no dropout to the sublayer outputs",
           encoder_layer(pre=ENC_PRE.replace("self.dropout(", "("), post=ENC_POST.replace("self.dropout(", "(")),
           "apply self.dropout to each sublayer's output"),
    Answer("EncoderLayer", "Post-LN normalises the sublayer output before the residual sum",
           encoder_layer(post='''        x = x + self.dropout(self.norm1(self.self_attn(x, x, x, src_mask)))
        return x + self.dropout(self.norm2(self.feed_forward(x)))'''), "to the sublayer's output only"),
    Answer("EncoderLayer", "uses norm1 for both sublayers",
           encoder_layer(pre=ENC_PRE.replace("self.norm2", "self.norm1"), post=ENC_POST.replace("self.norm2", "self.norm1")),
           "norm1 used for both sublayers"),
    Answer("EncoderLayer", "does not pass src_mask to the self-attention",
           encoder_layer(pre=ENC_PRE.replace(", src_mask)", ")"), post=ENC_POST.replace(", src_mask)", ")")),
           "pass src_mask to the self-attention"),
    Answer("EncoderLayer", "uses F.dropout without training=self.training",
           encoder_layer(pre=ENC_PRE.replace("self.dropout(", "F.dropout(p=self.dropout.p, input="),
                         post=ENC_POST.replace("self.dropout(", "F.dropout(p=self.dropout.p, input=")),
           "dropout must be off in eval mode"),
    Answer("EncoderLayer", "hard-codes the attention's dropout", encoder_layer(attn_dropout="0.1"),
           "pass the dropout argument on"),
    Answer("EncoderLayer", "Pre-LN adds the normalised x back instead of x",
           encoder_layer(pre='''            y = self.norm1(x)
            x = y + self.dropout(self.self_attn(y, y, y, src_mask))
            y = self.norm2(x)
            return y + self.dropout(self.feed_forward(y))'''), "is norm(x) added back"),
    # DecoderLayer
    Answer("DecoderLayer", "cross-attention attends to x instead of memory",
           decoder_layer(pre=DEC_PRE.replace("self.norm2(x), memory, memory", "self.norm2(x), self.norm2(x), self.norm2(x)"),
                         post=DEC_POST.replace("(x, memory, memory", "(x, x, x")), "does not depend on memory"),
    Answer("DecoderLayer", "cross-attention uses tgt_mask instead of src_mask",
           decoder_layer(pre=DEC_PRE.replace("memory, src_mask", "memory, tgt_mask"),
                         post=DEC_POST.replace("memory, src_mask", "memory, tgt_mask")), "are the masks swapped"),
    Answer("DecoderLayer", "self-attention without tgt_mask (causality leak)",
           decoder_layer(pre=DEC_PRE.replace("y, y, y, tgt_mask", "y, y, y"), post=DEC_POST.replace("x, x, x, tgt_mask", "x, x, x")),
           "depends on later target positions"),
    Answer("DecoderLayer", "the two masks swapped",
           decoder_layer(pre=DEC_PRE.replace("tgt_mask", "MASK").replace("src_mask", "tgt_mask").replace("MASK", "src_mask"),
                         post=DEC_POST.replace("tgt_mask", "MASK").replace("src_mask", "tgt_mask").replace("MASK", "src_mask")),
           "are the masks swapped"),
    Answer("DecoderLayer", "queries from memory, keys and values from x",
           decoder_layer(pre=DEC_PRE.replace("self.norm2(x), memory, memory", "memory, self.norm2(x), self.norm2(x)"),
                         post=DEC_POST.replace("(x, memory, memory", "(memory, x, x")), "takes its queries from x"),
    Answer("DecoderLayer", "writes Post-LN as Pre-LN (ignores norm_first=False)",
           decoder_layer(post=DEC_PRE.replace("            ", "        ")), "that is Pre-LN"),
    Answer("DecoderLayer", "uses norm1 for every sublayer",
           decoder_layer(pre=DEC_PRE.replace("self.norm2", "self.norm1").replace("self.norm3", "self.norm1"),
                         post=DEC_POST.replace("self.norm2", "self.norm1").replace("self.norm3", "self.norm1")),
           "used for the last sublayer"),
    Answer("DecoderLayer", "forgets the residual connections",
           decoder_layer(pre='''            y = self.norm1(x)
            x = self.dropout(self.self_attn(y, y, y, tgt_mask))
            x = self.dropout(self.cross_attn(self.norm2(x), memory, memory, src_mask))
            return self.dropout(self.feed_forward(self.norm3(x)))''',
                         post='''        x = self.norm1(self.dropout(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(self.dropout(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(self.dropout(self.feed_forward(x)))'''), "residual connection"),
    Answer("DecoderLayer", "Pre-LN normalises the memory with norm2 as well",
           decoder_layer(pre=DEC_PRE.replace("self.norm2(x), memory, memory",
                                             "self.norm2(x), self.norm2(memory), self.norm2(memory)")),
           "only x, the query side, is normalised"),
    Answer("DecoderLayer", "applies no dropout to the sublayer outputs",
           decoder_layer(pre=DEC_PRE.replace("self.dropout(", "("), post=DEC_POST.replace("self.dropout(", "(")),
           "apply self.dropout to each sublayer's output"),
    # Encoder
    Answer("Encoder", "repeats one layer object ([layer] * n_layers)",
           encoder(layers="nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first)] * n_layers)"),
           "share their weights"),
    Answer("Encoder", "has no final LayerNorm for Pre-LN", encoder(norm="None"), "needs a final LayerNorm"),
    Answer("Encoder", "adds a final LayerNorm to the Post-LN stack too", encoder(norm="LayerNorm(d_model)"),
           "`norm` should be None"),
    Answer("Encoder", "creates the final norm but never applies it", encoder(finish="return x"),
           "apply self.norm after the last layer"),
    Answer("Encoder", "does not pass src_mask to the layers", encoder(call="layer(x)"), "pass src_mask to every layer"),
    Answer("Encoder", "keeps the layers in a plain Python list",
           encoder(layers="[EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers)]"),
           ".eval() does not reach its layers", misleading="dropout must be off in eval mode"),
    Answer("Encoder", "does not pass norm_first on to the layers",
           encoder(layers="nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])"),
           "norm_first is not passed on to the layers"),
    Answer("Encoder", "applies the first layer n_layers times", encoder(call="self.layers[0](x, src_mask)"),
           "apply every layer in turn"),
    Answer("Encoder", "gives every layer the stack's input instead of the previous layer's output",
           encoder(signature="self, inputs, src_mask=None", call="layer(inputs, src_mask)"),
           "instead of the previous layer's output"),
    # Decoder
    Answer("Decoder", "keeps the layers in a plain Python list",
           decoder(layers="[DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers)]"),
           ".eval() does not reach its layers", misleading="dropout must be off in eval mode"),
    Answer("Decoder", "repeats one layer object ([layer] * n_layers)",
           decoder(layers="nn.ModuleList([DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first)] * n_layers)"),
           "share their weights"),
    Answer("Decoder", "passes the masks to the layers in the wrong order",
           decoder(call="layer(x, memory, tgt_mask, src_mask)"), "in this order"),
    Answer("Decoder", "gives each layer its own input as memory", decoder(call="layer(x, x, src_mask, tgt_mask)"),
           "every layer reads the same memory"),
    Answer("Decoder", "overwrites memory in the loop (x = memory = layer(...))",
           decoder(call="memory = layer(x, memory, src_mask, tgt_mask)"), "update only x",
           misleading="call each layer as"),
    Answer("Decoder", "does not pass tgt_mask to the layers", decoder(call="layer(x, memory, src_mask)"),
           "pass tgt_mask to every layer"),
    Answer("Decoder", "has no final LayerNorm for Pre-LN", decoder(norm="None"), "needs a final LayerNorm"),
    Answer("Decoder", "creates the final norm but never applies it", decoder(finish="return x"),
           "apply self.norm after the last layer"),
    Answer("Decoder", "does not pass norm_first on to the layers",
           decoder(layers="nn.ModuleList([DecoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])"),
           "norm_first is not passed on to the layers"),
    Answer("Decoder", "gives every layer the stack's input instead of the previous layer's output",
           decoder(signature="self, inputs, memory, src_mask=None, tgt_mask=None",
                   call="layer(inputs, memory, src_mask, tgt_mask)"), "instead of the previous layer's output"),
    # Transformer
    Answer("Transformer", "scales the embeddings by sqrt(d_model) a second time",
           transformer(src_in="self.pos_encoding(self.src_embed(src) * math.sqrt(self.d_model))",
                       tgt_in="self.pos_encoding(self.tgt_embed(tgt) * math.sqrt(self.d_model))"),
           "multiplied by sqrt(d_model) a second time"),
    Answer("Transformer", "shares one embedding table between source and target",
           transformer(embeddings='''        self.src_embed = self.tgt_embed = TokenEmbedding(max(src_vocab_size, tgt_vocab_size), d_model,
                                                         padding_idx=pad_idx)'''),
           "src_embed and tgt_embed are the same module"),
    Answer("Transformer", "inverts the polarity of the source mask",
           transformer(src_mask="~padding_mask(src, self.pad_idx)"), "check the masks forward builds"),
    Answer("Transformer", "never applies Xavier", transformer(generator_and_init=GENERATOR), "does not look Xavier-uniform"),
    Answer("Transformer", "Xavier for the linear layers only (embeddings keep N(0, 1))",
           transformer(generator_and_init=GENERATOR + '''
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)'''), "src_embed.embedding.weight does not look Xavier-uniform"),
    Answer("Transformer", "runs the Xavier loop before creating the generator",
           transformer(generator_and_init=XAVIER + "\n" + GENERATOR), "generator.weight does not look Xavier-uniform"),
    Answer("Transformer", "returns the decoder states without the generator",
           transformer(output="self.decode(tgt, memory, src_mask, tgt_mask)"), "apply the generator"),
    Answer("Transformer", "returns softmax probabilities",
           transformer(output="self.generator(self.decode(tgt, memory, src_mask, tgt_mask)).softmax(dim=-1)"),
           "not softmax probabilities"),
    Answer("Transformer", "returns log-probabilities",
           transformer(output="F.log_softmax(self.generator(self.decode(tgt, memory, src_mask, tgt_mask)), dim=-1)"),
           "log-probabilities"),
    Answer("Transformer", "builds the target mask with padding_mask only (not causal)",
           transformer(tgt_mask="padding_mask(tgt, self.pad_idx)"), "sees the future"),
    Answer("Transformer", "builds tgt_mask with causal_mask alone (the padding of tgt is not masked)",
           transformer(tgt_mask="causal_mask(tgt.size(1), device=tgt.device)"), "use target_mask(tgt, pad_idx)",
           misleading="check the masks forward builds"),
    Answer("Transformer", "gives the source padding mask to the decoder's self-attention",
           transformer(output="self.generator(self.decode(tgt, memory, src_mask, src_mask))"),
           "tgt_mask = target_mask(tgt, pad_idx)"),
    Answer("Transformer", "builds the masks with pad id 0 instead of self.pad_idx",
           transformer(src_mask="padding_mask(src, 0)", tgt_mask="target_mask(tgt, 0)"), "pad_idx is ignored"),
    Answer("Transformer", "adds no positional encoding to the target",
           transformer(tgt_in="self.tgt_embed(tgt)"), "not added to the target embeddings"),
    Answer("Transformer", "does not pass norm_first on to Encoder and Decoder",
           transformer().replace("dropout, norm_first)", "dropout)"), "pass norm_first on to Encoder and Decoder"),
    Answer("Transformer", "swaps num_encoder_layers and num_decoder_layers",
           transformer().replace("Encoder(num_encoder_layers", "Encoder(num_decoder_layers")
                        .replace("Decoder(num_decoder_layers", "Decoder(num_encoder_layers"), "num_encoder_layers = 2 layers"),
    Answer("Transformer", "passes d_ff where n_heads belongs to the stacks",
           transformer().replace("n_heads, d_ff, dropout", "d_ff, n_heads, dropout"),
           "pass d_model, n_heads and d_ff on to Encoder and Decoder"),
]

UNUSUAL = [
    Answer("EncoderLayer", "a sublayer helper with lambdas and a second dropout module", '''
class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def _sublayer(self, x, sublayer, norm, dropout):
        if self.norm_first:
            return x + dropout(sublayer(norm(x)))
        return norm(x + dropout(sublayer(x)))

    def forward(self, x, src_mask=None):
        x = self._sublayer(x, lambda y: self.self_attn(y, y, y, mask=src_mask), self.norm1, self.dropout)
        return self._sublayer(x, self.feed_forward, self.norm2, self.dropout2)
'''),
    Answer("EncoderLayer", "F.dropout with the training flag, separate code paths", '''
class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.norm2 = LayerNorm(d_model)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, src_mask=None):
        p, training = self.dropout.p, self.training
        if not self.norm_first:
            attended = self.self_attn(x, x, x, src_mask)
            x = self.norm1(x + F.dropout(attended, p, training))
            return self.norm2(x + F.dropout(self.feed_forward(x), p, training))
        normed = self.norm1(x)
        x = x + F.dropout(self.self_attn(normed, normed, normed, src_mask), p, training)
        return x + F.dropout(self.feed_forward(self.norm2(x)), p, training)
'''),
    Answer("DecoderLayer", "a loop over (sublayer, norm) pairs", '''
class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        steps = [(lambda y: self.self_attn(y, y, y, mask=tgt_mask), self.norm1),
                 (lambda y: self.cross_attn(query=y, key=memory, value=memory, mask=src_mask), self.norm2),
                 (self.feed_forward, self.norm3)]
        for sublayer, norm in steps:
            if self.norm_first:
                x = x + self.dropout(sublayer(norm(x)))
            else:
                x = norm(x + self.dropout(sublayer(x)))
        return x
'''),
    Answer("Encoder", "copy.deepcopy of one layer, keyword arguments", '''
import copy

class Encoder(nn.Module):
    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        layer = EncoderLayer(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(n_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        for layer in self.layers:
            x = layer(x, src_mask=src_mask)
        if self.norm is not None:
            x = self.norm(x)
        return x
'''),
    Answer("Encoder", "append in a loop, functools.reduce", '''
import functools

class Encoder(nn.Module):
    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first))
        self.norm = None
        if norm_first:
            self.norm = LayerNorm(d_model)

    def forward(self, x, src_mask=None):
        x = functools.reduce(lambda h, layer: layer(h, src_mask), self.layers, x)
        return self.norm(x) if self.norm else x
'''),
    Answer("Decoder", "copy.deepcopy, keyword arguments", '''
from copy import deepcopy

class Decoder(nn.Module):
    def __init__(self, n_layers, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([deepcopy(DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first))
                                     for _ in range(n_layers)])
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, src_mask=src_mask)
        return self.norm(x) if self.norm is not None else x
'''),
    Answer("Transformer", "Xavier through self.apply, masks written inline, padding rows zeroed again", '''
class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, num_encoder_layers=6,
                 num_decoder_layers=6, d_ff=2048, dropout=0.1, max_len=5000, pad_idx=0, norm_first=False):
        super().__init__()
        self.pad_idx = pad_idx
        self.src_embed = TokenEmbedding(src_vocab_size, d_model, pad_idx)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model, pad_idx)
        self.pos_encoding = PositionalEncoding(d_model, max_len=max_len, dropout=dropout)
        self.encoder = Encoder(num_encoder_layers, d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first)
        self.decoder = Decoder(num_decoder_layers, d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.xavier_uniform_(module.weight)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()

    def encode(self, src, src_mask):
        x = self.pos_encoding(self.src_embed(src))
        return self.encoder(x, src_mask=src_mask)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        y = self.pos_encoding(self.tgt_embed(tgt))
        return self.decoder(y, memory, src_mask=src_mask, tgt_mask=tgt_mask)

    def forward(self, src, tgt):
        src_mask = (src != self.pad_idx).unsqueeze(1).unsqueeze(2)
        length = tgt.size(1)
        future = torch.tril(torch.ones(length, length, dtype=torch.bool, device=tgt.device))
        tgt_mask = (tgt != self.pad_idx)[:, None, None, :] & future
        hidden = self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask)
        return self.generator(hidden)
'''),
    Answer("Transformer", "Xavier on named weights, generator tied to nothing, keyword masks", '''
class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, num_encoder_layers=6,
                 num_decoder_layers=6, d_ff=2048, dropout=0.1, max_len=5000, pad_idx=0, norm_first=False):
        super().__init__()
        self.src_embed = TokenEmbedding(vocab_size=src_vocab_size, d_model=d_model, padding_idx=pad_idx)
        self.tgt_embed = TokenEmbedding(vocab_size=tgt_vocab_size, d_model=d_model, padding_idx=pad_idx)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_encoder_layers, d_model, n_heads, d_ff, dropout, norm_first)
        self.decoder = Decoder(num_decoder_layers, d_model, n_heads, d_ff, dropout, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        self.pad_idx = pad_idx
        for name, weight in self.named_parameters():
            if weight.ndim >= 2:
                nn.init.xavier_uniform_(weight)

    def encode(self, src, src_mask):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt):
        masks = dict(src_mask=padding_mask(src, self.pad_idx), tgt_mask=target_mask(tgt, self.pad_idx))
        memory = self.encode(src, masks["src_mask"])
        return self.generator(self.decode(tgt, memory, **masks))
'''),
]
