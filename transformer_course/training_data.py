"""Multi30k assembled for training: the train and validation pairs as TranslationDatasets with their
vocabularies (words or subword pieces), and the padded batches of one epoch."""
from pathlib import Path
from typing import NamedTuple

from .data import (SPECIALS, TokenBatchSampler, TranslationDataset, Vocab, build_vocab, collate_batch,
                   default_cache_dir, load_split, tokenize)
from .subword import SubwordTokenizer

__all__ = ["TrainingData", "load_multi30k", "batches_of"]


class TrainingData(NamedTuple):
    train: TranslationDataset
    val: TranslationDataset
    src_vocab: Vocab
    tgt_vocab: Vocab
    subword: SubwordTokenizer = None   # the joint subword model, when the data is cut into subwords


def load_multi30k(max_train_pairs=None, max_val_pairs=None, min_freq=2, lowercase=True, tokenizer="spacy",
                  vocab_size=None, mirror=None, cache_dir=None, vocab_builder=None):
    """Multi30k's train and validation pairs (the first `max_*_pairs` of each; None: all) as
    TranslationDatasets, with vocabularies built from those training pairs.

    tokenizer="spacy": words, one vocabulary per language (tokens seen at least `min_freq` times);
    "subword": SentencePiece BPE learnt on both languages' training text, `vocab_size` pieces, one vocabulary
    shared by both sides. `mirror`: a folder with the official files (default $MULTI30K_MIRROR, else
    download into the cache). `vocab_builder`: the build_vocab to use (a notebook passes its own; default the
    package's)."""
    if tokenizer not in ("spacy", "subword"):
        raise ValueError(f"tokenizer must be 'spacy' or 'subword', got {tokenizer!r}")
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    texts = {}
    for split, limit in (("train", max_train_pairs), ("val", max_val_pairs)):
        german, english = load_split(split, cache_dir=cache_dir, mirror=mirror, progress=False)
        texts[split] = (german[:limit], english[:limit])
    if tokenizer == "spacy":
        tokens = {split: (tokenize(german, "de", lowercase, cache_dir / "tokens"),
                          tokenize(english, "en", lowercase, cache_dir / "tokens"))
                  for split, (german, english) in texts.items()}
        vocab_builder = vocab_builder or build_vocab
        src_vocab = vocab_builder(tokens["train"][0], min_freq=min_freq)
        tgt_vocab = vocab_builder(tokens["train"][1], min_freq=min_freq)
        subword = None
    else:
        if lowercase:
            texts = {split: [[t.lower() for t in side] for side in pair] for split, pair in texts.items()}
        subword = SubwordTokenizer.train(texts["train"][0] + texts["train"][1], vocab_size or 8000,
                                         cache_dir=cache_dir / "tokens")
        tokens = {split: (subword.encode(german), subword.encode(english))
                  for split, (german, english) in texts.items()}
        src_vocab = tgt_vocab = Vocab([*SPECIALS, *(p for p in subword.pieces if p not in SPECIALS)])
    return TrainingData(TranslationDataset(*tokens["train"], src_vocab, tgt_vocab),
                        TranslationDataset(*tokens["val"], src_vocab, tgt_vocab), src_vocab, tgt_vocab, subword)


def batches_of(dataset, max_tokens, shuffle=False, seed=0, epoch=0, pad_idx=0):
    """The padded (src, tgt) batches of one epoch of `dataset`, cut by TokenBatchSampler (similar lengths
    together, at most `max_tokens` padded tokens a side); shuffled with `shuffle`, as epoch `epoch` of `seed`."""
    sampler = TokenBatchSampler(dataset.lengths, max_tokens, shuffle=shuffle, seed=seed)
    for indices in sampler.batches(epoch):
        yield collate_batch([dataset[i] for i in indices], pad_idx, pad_idx)
