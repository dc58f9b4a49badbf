"""Small builders the tests share: a tiny seeded Transformer, a Multi30k mirror of the course's six files, a
stand-in held-out set."""
import gzip
import os

import torch

from transformer_course import Transformer, data


def tiny_model(pad_idx=0, dropout=0.0, seed=0, src_vocab=11, tgt_vocab=13):
    """A one-layer Transformer (d_model 16, 2 heads) with seeded weights, in training mode."""
    torch.manual_seed(seed)
    return Transformer(src_vocab, tgt_vocab, d_model=16, n_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                       d_ff=32, dropout=dropout, max_len=64, pad_idx=pad_idx)


def mirror_of_six(folder, mirror):
    """`folder`, made a Multi30k mirror of the six files the course trains and tests on, linked from `mirror`:
    no test_2017_flickr."""
    folder.mkdir(exist_ok=True)
    for split in data.COURSE_SPLITS:
        for lang in data.LANGS:
            (folder / f"{split}.{lang}.gz").symlink_to(os.path.join(mirror, f"{split}.{lang}.gz"))
    return folder


def add_held_out_stand_in(folder, pairs, monkeypatch):
    """A stand-in test_2017_flickr in the mirror `folder`: the (german, english) `pairs`, with checksums the
    package is told for the test's duration (the real files are not in this project's mirror)."""
    for lang, sentences in zip(data.LANGS, zip(*pairs)):
        path = folder / f"{data.HELD_OUT}.{lang}.gz"
        path.write_bytes(gzip.compress("".join(s + "\n" for s in sentences).encode()))
        monkeypatch.setitem(data.SHA256SUMS, path.name, data.sha256_of(path))
