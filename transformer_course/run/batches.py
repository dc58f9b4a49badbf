"""Multi30k assembled for training, in one place: the pairs as TranslationDatasets with their vocabularies
(words or subword pieces) (`load_multi30k`, which the trainer and notebook 07 use), the same as DataLoaders
(`multi30k_dataloaders`), and the padded batches of one epoch (`batches_of`). The pieces they are built from
(download, tokenizing, Vocab, TranslationDataset, TokenBatchSampler, collate_batch) are in data.py."""
import functools
from pathlib import Path
from typing import NamedTuple

from torch.utils.data import DataLoader

from ..data import (PAD, SPECIALS, TokenBatchSampler, TranslationDataset, Vocab, build_vocab, collate_batch,
                   default_cache_dir, load_split, tokenize)
from ..subword import SubwordTokenizer

__all__ = ["TrainingData", "load_multi30k", "Multi30k", "multi30k_dataloaders", "batches_of"]


class TrainingData(NamedTuple):
    train: TranslationDataset
    val: TranslationDataset
    src_vocab: Vocab
    tgt_vocab: Vocab
    subword: SubwordTokenizer = None   # the joint subword model, when the data is cut into subwords
    test: TranslationDataset = None    # test_2016_flickr, when asked for (with_test=True)


def load_multi30k(max_train_pairs=None, max_val_pairs=None, min_freq=2, lowercase=False, tokenizer="spacy",
                  vocab_size=None, vocab_builder=None, with_test=False, cache_dir=None, cache_tokens=True,
                  **fetch_options):
    """Multi30k's train and validation pairs (the first `max_*_pairs` of each; None: all), and the test pairs
    with `with_test`, as TranslationDatasets, with vocabularies built from those training pairs.

    tokenizer="spacy": words, one vocabulary per language (tokens seen at least `min_freq` times);
    "subword": SentencePiece BPE learnt on both languages' training text, `vocab_size` pieces, one vocabulary
    shared by both sides. `lowercase`: lowercase the text first (the configurations say which they want).
    `vocab_builder`: the build_vocab to use (a notebook passes its own; default the package's). Tokens and
    subword models are cached under `cache_dir`/tokens unless `cache_tokens` is False. `fetch_options`
    (mirror, base_url, checksums, ...) go to data.fetch; `mirror`: a folder with the official files (default
    $MULTI30K_MIRROR, else download into the cache)."""
    if tokenizer not in ("spacy", "subword"):
        raise ValueError(f"tokenizer must be 'spacy' or 'subword', got {tokenizer!r}")
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    token_cache = cache_dir / "tokens" if cache_tokens else None
    limits = {"train": max_train_pairs, "val": max_val_pairs, **({"test": None} if with_test else {})}
    texts = {}
    for split, limit in limits.items():
        german, english = load_split(split, cache_dir=cache_dir, **{"progress": False, **fetch_options})
        texts[split] = (german[:limit], english[:limit])
    if tokenizer == "spacy":
        tokens, src_vocab, tgt_vocab, subword = _words(texts, lowercase, min_freq, vocab_builder, token_cache)
    else:
        tokens, src_vocab, tgt_vocab, subword = _pieces(texts, lowercase, vocab_size, token_cache)
    datasets = {split: TranslationDataset(*pair, src_vocab, tgt_vocab) for split, pair in tokens.items()}
    return TrainingData(datasets["train"], datasets["val"], src_vocab, tgt_vocab, subword, datasets.get("test"))


def _words(texts, lowercase, min_freq, vocab_builder, token_cache):
    """spaCy tokens of every split, and one word vocabulary per language from the training split."""
    tokens = {split: (tokenize(german, "de", lowercase, token_cache), tokenize(english, "en", lowercase, token_cache))
              for split, (german, english) in texts.items()}
    vocab_builder = vocab_builder or build_vocab
    src_vocab = vocab_builder(tokens["train"][0], min_freq=min_freq)
    tgt_vocab = vocab_builder(tokens["train"][1], min_freq=min_freq)
    return tokens, src_vocab, tgt_vocab, None


def _pieces(texts, lowercase, vocab_size, token_cache):
    """Subword pieces of every split, from one SentencePiece model learnt on both languages' training text,
    and the vocabulary both sides share."""
    if lowercase:
        texts = {split: [[t.lower() for t in side] for side in pair] for split, pair in texts.items()}
    subword = SubwordTokenizer.train(texts["train"][0] + texts["train"][1], vocab_size or 8000, cache_dir=token_cache)
    tokens = {split: (subword.to_pieces(german), subword.to_pieces(english)) for split, (german, english) in texts.items()}
    vocab = Vocab([*SPECIALS, *(p for p in subword.pieces if p not in SPECIALS)])
    return tokens, vocab, vocab, subword


class Multi30k(NamedTuple):
    train: DataLoader
    val: DataLoader
    test: DataLoader
    src_vocab: Vocab  # German
    tgt_vocab: Vocab  # English


def multi30k_dataloaders(max_tokens=4096, min_freq=2, lowercase=False, seed=0, pool_size=4096, num_workers=0,
                         **data_options) -> Multi30k:
    """German→English DataLoaders for train (shuffled, length-bucketed), val and test (in file order), and
    the two vocabularies, built from the training split only: `load_multi30k(with_test=True)`'s datasets
    (`data_options`: its other options, cache_dir, mirror, ...), batched.

    The paper used 25,000 tokens a batch on 8 GPUs; 4096 suits one GPU and the small Multi30k.
    """
    data = load_multi30k(min_freq=min_freq, lowercase=lowercase, with_test=True, **data_options)
    pad = (data.src_vocab.stoi[PAD], data.tgt_vocab.stoi[PAD])
    collate = functools.partial(collate_batch, src_pad_id=pad[0], tgt_pad_id=pad[1])

    def loader(dataset, shuffle):
        sampler = TokenBatchSampler(dataset.lengths, max_tokens, shuffle=shuffle, pool_size=pool_size, seed=seed)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers)

    return Multi30k(loader(data.train, True), loader(data.val, False), loader(data.test, False), data.src_vocab,
                    data.tgt_vocab)


def batches_of(dataset, max_tokens, shuffle=False, seed=0, epoch=0, pad_idx=0):
    """The padded (src, tgt) batches of one epoch of `dataset`, cut by TokenBatchSampler (similar lengths
    together, at most `max_tokens` padded tokens a side); shuffled with `shuffle`, as epoch `epoch` of `seed`."""
    sampler = TokenBatchSampler(dataset.lengths, max_tokens, shuffle=shuffle, seed=seed)
    for indices in sampler.batches(epoch):
        yield collate_batch([dataset[i] for i in indices], pad_idx, pad_idx)
