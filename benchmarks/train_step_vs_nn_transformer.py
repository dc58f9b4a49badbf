"""Time one training step of the course's Transformer against a model built around torch.nn.Transformer.

Both models have the same sizes, the same embeddings, positional encoding, generator and masks; a step is
forward (embeddings -> encoder/decoder -> generator), cross-entropy, backward and an Adam update. The two
are timed in the same run, step by step in alternating order, after a warm-up; the figures are medians.
Our model runs with need_weights=False (PyTorch's fused attention kernel), as the course's training does.

From the repository root, with the package installed (pip install -e .) or PYTHONPATH=. :

    python3 benchmarks/train_step_vs_nn_transformer.py            # defaults: about a minute on 2 idle CPU cores
    python3 benchmarks/train_step_vs_nn_transformer.py --help
"""
import argparse
import os
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.embeddings import PositionalEncoding, TokenEmbedding
from transformer_course.model import Transformer


class TorchTransformer(nn.Module):
    """nn.Transformer with the course model's embeddings, positional encoding and generator around it."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, n_heads, num_encoder_layers, num_decoder_layers,
                 d_ff, dropout, pad_idx, norm_first):
        super().__init__()
        self.src_embed = TokenEmbedding(src_vocab_size, d_model, padding_idx=pad_idx)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model, padding_idx=pad_idx)
        self.pos_encoding = PositionalEncoding(d_model, 5000, dropout)
        self.transformer = nn.Transformer(d_model, n_heads, num_encoder_layers, num_decoder_layers, d_ff, dropout,
                                          activation="relu", batch_first=True, norm_first=norm_first)
        if not norm_first:  # nn.Transformer always adds a final LayerNorm; the paper's Post-LN has none
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        self.pad_idx = pad_idx
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, tgt):
        # nn.Transformer's masks have the opposite polarity: True = masked out.
        src_padding = src == self.pad_idx
        tgt_padding = tgt == self.pad_idx
        future = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device).triu(1)
        hidden = self.transformer(
            self.pos_encoding(self.src_embed(src)), self.pos_encoding(self.tgt_embed(tgt)),
            tgt_mask=future, src_key_padding_mask=src_padding, tgt_key_padding_mask=tgt_padding,
            memory_key_padding_mask=src_padding)
        return self.generator(hidden)


def random_batch(generator, batch_size, min_len, max_len, vocab_size, pad_idx):
    """[batch_size, longest] token ids of random lengths in [min_len, max_len], padded at the end."""
    lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator)
    tokens = torch.randint(pad_idx + 1, vocab_size, (batch_size, int(lengths.max())), generator=generator)
    positions = torch.arange(tokens.size(1))
    return tokens.masked_fill(positions[None, :] >= lengths[:, None], pad_idx)


def timed_train_step(model, optimizer, src, tgt, pad_idx):
    """One training step; returns its milliseconds: wall clock of the whole step, of forward + loss + backward
    and of the Adam update, and the CPU time of all threads for the whole step."""
    wall, cpu = time.perf_counter(), time.process_time()
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=pad_idx)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    backward_done = time.perf_counter()
    optimizer.step()
    end = time.perf_counter()
    return {"step": (end - wall) * 1e3, "fwd+bwd": (backward_done - wall) * 1e3, "adam": (end - backward_done) * 1e3,
            "cpu": (time.process_time() - cpu) * 1e3}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=3, help="encoder layers and decoder layers (each)")
    parser.add_argument("--d-ff", type=int, default=1024)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--vocab", type=int, default=8000, help="source and target vocabulary size")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--min-len", type=int, default=20)
    parser.add_argument("--max-len", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each model first")
    parser.add_argument("--steps", type=int, default=15, help="timed steps of each model")
    parser.add_argument("--norm-first", action="store_true", help="Pre-LN instead of the paper's Post-LN")
    parser.add_argument("--keep-weights", action="store_true",
                        help="time our model with need_weights=True (explicit attention) instead of the fused kernel")
    parser.add_argument("--adam", choices=["fused", "default"], default="fused",
                        help="fused: Adam(fused=True), one kernel per parameter; default: Adam's per-parameter loop "
                             "of small ops, which costs more for ours (separate w_q, w_k, w_v: more parameter tensors)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def interleaved_times(models, batches, warmup, steps, pad_idx):
    """name -> one dict of timings per timed step; each step runs both models back to back, in turns."""
    times = {name: [] for name in models}
    for step in range(warmup + steps):
        batch = batches[step % len(batches)]
        order = list(models) if step % 2 == 0 else list(models)[::-1]  # alternate who goes first
        for name in order:
            timing = timed_train_step(*models[name], *batch, pad_idx)
            if step >= warmup:
                times[name].append(timing)
    return times


def print_times(times):
    def median(name, part):
        return statistics.median(t[part] for t in times[name])

    print(f"\nmedian ms per step     {'step':>8} {'fwd+bwd':>8} {'adam':>8}   {'CPU ms (all threads)':>20}")
    for name in times:
        print(f"{name:>20}   {median(name, 'step'):8.1f} {median(name, 'fwd+bwd'):8.1f} {median(name, 'adam'):8.1f}"
              f"   {median(name, 'cpu'):20.1f}")
    # Each step's pair ran back to back, so the ratio within a pair is robust to load that comes and goes.
    for part in ("step", "fwd+bwd"):
        paired = statistics.median(t[part] / o[part] for t, o in zip(times["nn.Transformer"], times["ours"]))
        print(f"ratio nn.Transformer / ours, {part:>7}: {median('nn.Transformer', part) / median('ours', part):.3f} "
              f"(of the medians), {paired:.3f} (median of the step-by-step ratios)")
    print(">= 1.0 means ours is at least as fast")


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="enable_nested_tensor is True")  # nn.Transformer with Pre-LN
    torch.manual_seed(args.seed)
    pad_idx = 0
    sizes = dict(d_model=args.d_model, n_heads=args.n_heads, num_encoder_layers=args.layers,
                 num_decoder_layers=args.layers, d_ff=args.d_ff, dropout=args.dropout, pad_idx=pad_idx,
                 norm_first=args.norm_first)
    ours = Transformer(args.vocab, args.vocab, **sizes).set_need_weights(args.keep_weights).train()
    theirs = TorchTransformer(args.vocab, args.vocab, **sizes).train()
    n_ours, n_theirs = (sum(p.numel() for p in m.parameters()) for m in (ours, theirs))
    assert n_ours == n_theirs, f"the two models differ in size: {n_ours} vs {n_theirs} parameters"
    adam = dict(lr=1e-4, fused=args.adam == "fused")
    models = {"ours": (ours, torch.optim.Adam(ours.parameters(), **adam)),
              "nn.Transformer": (theirs, torch.optim.Adam(theirs.parameters(), **adam))}

    data = torch.Generator().manual_seed(args.seed)
    batches = [tuple(random_batch(data, args.batch_size, args.min_len, args.max_len, args.vocab, pad_idx)
                     for _ in ("src", "tgt")) for _ in range(4)]

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"d_model {args.d_model}, {args.n_heads} heads, {args.layers}+{args.layers} layers, d_ff {args.d_ff}, "
          f"dropout {args.dropout}, vocab {args.vocab}, {'Pre' if args.norm_first else 'Post'}-LN, "
          f"{n_ours / 1e6:.2f}M parameters each")
    print(f"batch {args.batch_size} sentences of {args.min_len}-{args.max_len} tokens; "
          f"ours with need_weights={args.keep_weights}; {args.adam} Adam; "
          f"{args.warmup} warm-up + {args.steps} timed steps each")

    print_times(interleaved_times(models, batches, args.warmup, args.steps, pad_idx))


if __name__ == "__main__":
    main()
