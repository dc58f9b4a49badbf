"""The figures the notebooks draw more than once: heatmaps of matrices (encodings, attention, masks), costs against
length on log-log axes, and the map of the Transformer that opens every notebook."""
import matplotlib.pyplot as plt
import torch


def heatmap(matrix, ax=None, title=None, xlabel=None, ylabel=None, xticklabels=None, yticklabels=None,
            cmap="viridis", colorbar=True, **imshow_kwargs):
    """Draw a 2-D tensor or array as an image, row 0 at the top; returns the axes."""
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().float().cpu().numpy()
    if ax is None:
        _, ax = plt.subplots()
    image = ax.imshow(matrix, cmap=cmap, aspect="auto", interpolation="nearest", **imshow_kwargs)
    if colorbar:
        ax.figure.colorbar(image, ax=ax)
    if xticklabels is not None:
        ax.set_xticks(range(len(xticklabels)), labels=xticklabels, rotation=90)
    if yticklabels is not None:
        ax.set_yticks(range(len(yticklabels)), labels=yticklabels)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    return ax


def log_log_lines(x, series, xlabel, ylabel, title, ax=None, figsize=(6.5, 3.6)):
    """One line with markers per entry of ``series`` (label -> values at ``x``) on log-log axes; returns the
    axes. A cost that grows as n**k is a line of slope k."""
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    for label, values in series.items():
        ax.plot(x, values, "o-", label=label)
    ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend()
    return ax


# The Transformer of the paper's Figure 1, as boxes: name -> (x, y, label) with the centre in axes units.
ARCHITECTURE_BOXES = {
    "src_embed": (0.25, 0.04, "input embedding"), "tgt_embed": (0.72, 0.04, "output embedding"),
    "src_pos": (0.25, 0.13, "+ positional encoding"), "tgt_pos": (0.72, 0.13, "+ positional encoding"),
    "enc_attn": (0.25, 0.27, "multi-head self-attention"), "enc_norm1": (0.25, 0.35, "add & norm"),
    "enc_ffn": (0.25, 0.44, "feed-forward"), "enc_norm2": (0.25, 0.52, "add & norm"),
    "dec_self": (0.72, 0.27, "masked multi-head self-attention"), "dec_norm1": (0.72, 0.35, "add & norm"),
    "dec_cross": (0.72, 0.44, "multi-head cross-attention"), "dec_norm2": (0.72, 0.52, "add & norm"),
    "dec_ffn": (0.72, 0.61, "feed-forward"), "dec_norm3": (0.72, 0.69, "add & norm"),
    "generator": (0.72, 0.81, "linear + softmax"),
    "loss": (0.55, 0.93, "label-smoothed loss (training)"), "search": (0.88, 0.93, "greedy / beam search, BLEU"),
}
ARCHITECTURE_ARROWS = [("src_embed", "src_pos"), ("src_pos", "enc_attn"), ("enc_attn", "enc_norm1"),
                       ("enc_norm1", "enc_ffn"), ("enc_ffn", "enc_norm2"), ("enc_norm2", "dec_cross"),
                       ("tgt_embed", "tgt_pos"), ("tgt_pos", "dec_self"), ("dec_self", "dec_norm1"),
                       ("dec_norm1", "dec_cross"), ("dec_cross", "dec_norm2"), ("dec_norm2", "dec_ffn"),
                       ("dec_ffn", "dec_norm3"), ("dec_norm3", "generator"), ("generator", "loss"),
                       ("generator", "search")]
_ATTENTION = ("enc_attn", "dec_self", "dec_cross")
_LAYERS = ("enc_attn", "enc_norm1", "enc_ffn", "enc_norm2", "dec_self", "dec_norm1", "dec_cross", "dec_norm2",
           "dec_ffn", "dec_norm3")
# What each notebook builds: the part's name -> (its boxes, a caption).
ARCHITECTURE_PARTS = {
    "positional encoding": (("src_embed", "tgt_embed", "src_pos", "tgt_pos"),
                            "notebook 01: token embeddings and the positional encoding"),
    "attention": (_ATTENTION, "notebook 02: scaled dot-product attention, inside every attention block"),
    "masking": (_ATTENTION,
                "notebook 03: the masks, padding in every attention block\nand causal in the decoder's self-attention"),
    "multi-head attention": (_ATTENTION, "notebook 04: multi-head attention"),
    "layer norm and feed-forward": (("enc_norm1", "enc_norm2", "dec_norm1", "dec_norm2", "dec_norm3", "enc_ffn",
                                     "dec_ffn"), "notebook 05: layer normalisation and the feed-forward network"),
    "encoder and decoder": (_LAYERS + ("generator",), "notebook 06: the layers, the stacks and the whole model"),
    "training": (("generator", "loss"), "notebook 07: training with the label-smoothed loss"),
    "decoding": (("generator", "search"), "notebook 08: decoding and BLEU"),
    "decoder-only": (("tgt_embed", "dec_self", "dec_norm1", "dec_ffn", "dec_norm3", "generator"),
                     "notebook 09: a GPT keeps the decoder's masked self-attention and feed-forward (norms first),\n"
                     "drops the encoder and the cross-attention; RoPE inside attention replaces the encoding"),
}
HIGHLIGHT, PLAIN = "#ffc857", "#f2f2f2"


def architecture_map(highlight=None, ax=None):
    """The Transformer's blocks (encoder left, decoder right, N layers each) with the boxes of the part named by
    ``highlight`` (a key of ARCHITECTURE_PARTS, or None) filled in colour; returns the axes."""
    if highlight is not None and highlight not in ARCHITECTURE_PARTS:
        raise ValueError(f"unknown part {highlight!r}; choose one of {', '.join(map(repr, ARCHITECTURE_PARTS))}")
    chosen, caption = ARCHITECTURE_PARTS.get(highlight, ((), "the Transformer"))
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5.5))
    for left, bottom, height, text in [(0.06, 0.21, 0.37, "encoder layer, N×"),
                                       (0.53, 0.21, 0.54, "decoder layer, N×")]:
        ax.add_patch(plt.Rectangle((left, bottom), 0.38, height, facecolor="none", edgecolor="0.6", linestyle="--"))
        ax.text(left + 0.01, bottom + height - 0.012, text, fontsize=7.5, color="0.4", va="top")
    for name, (x, y, label) in ARCHITECTURE_BOXES.items():
        lit = name in chosen
        ax.text(x, y, label, ha="center", va="center", fontsize=8, zorder=3, fontweight="bold" if lit else "normal",
                bbox=dict(boxstyle="round,pad=0.4", facecolor=HIGHLIGHT if lit else PLAIN,
                          edgecolor="black" if lit else "0.6", linewidth=1.6 if lit else 0.8))
    for start, end in ARCHITECTURE_ARROWS:
        (x0, y0, _), (x1, y1, _) = ARCHITECTURE_BOXES[start], ARCHITECTURE_BOXES[end]
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), zorder=2,
                    arrowprops=dict(arrowstyle="-|>", color="0.45", shrinkA=9, shrinkB=9))
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.set_title(f"The Transformer (the paper's Figure 1)\n{caption}", fontsize=9.5)
    ax.axis("off")
    return ax
