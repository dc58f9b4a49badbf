"""Multi30k (task 1, German→English) for notebook 07 and the trainer, without torchtext.

The pipeline, one step per section below:

    official .gz files --fetch--> verified local copies --load_split--> aligned sentence strings
    --tokenize--> token lists --build_vocab / Vocab--> ids --TranslationDataset--> (src, tgt) id tensors
    --TokenBatchSampler + collate_batch--> padded [B, S] / [B, T] LongTensors

`transformer_course.run.batches` runs all of it (`load_multi30k`, `multi30k_dataloaders`). The data is
downloaded at run time and never redistributed (see data/README.md); set MULTI30K_MIRROR to a folder holding
the six official .gz files to work offline, and MULTI30K_CACHE to move the download cache (default
~/.cache/transformer_course/multi30k).
"""
import functools
import gzip
import hashlib
import http.client
import importlib.metadata
import json
import os
import tempfile
import time
import urllib.error
import urllib.request
import warnings
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset, Sampler
from .progress import tqdm

from .extras import import_extra

__all__ = [
    "BASE_URL", "SHA256SUMS", "LINE_COUNTS", "SPECIALS",
    "Multi30kError", "MissingFileError", "ChecksumError", "DownloadError", "UnreadableFileError", "MisalignedError",
    "default_cache_dir", "fetch", "read_sentences", "load_split", "tokenize",
    "Vocab", "build_vocab", "TranslationDataset", "TokenBatchSampler", "collate_batch",
]

# ----------------------------------------------------------------------------- the official files

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
LANGS = ("de", "en")  # source, target
SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr", "test_2016_flickr": "test_2016_flickr",
          "test_2017_flickr": "test_2017_flickr"}
COURSE_SPLITS = ("train", "val", "test_2016_flickr")   # what the course trains and tests on: all six files needed
HELD_OUT = "test_2017_flickr"   # optional: scored only by `reproduce`, after every choice is made on val

# SHA-256 of the official files (unchanged upstream since 2018). They live in the package, not in a data
# folder, because on Colab only the installed package exists.
SHA256SUMS = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    # the WMT 2017 test set, held out: `reproduce` scores it only after every choice is made on val
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
}
LINE_COUNTS = {"train": 29000, "val": 1014, "test_2016_flickr": 1000, "test_2017_flickr": 1000}

SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
PAD, UNK, BOS, EOS = SPECIALS


class Multi30kError(Exception):
    """Something is wrong with the Multi30k files; the message says what to do about it."""


class MissingFileError(Multi30kError, FileNotFoundError):
    pass


class ChecksumError(Multi30kError, ValueError):
    pass


class DownloadError(Multi30kError, ConnectionError):
    pass


class UnreadableFileError(Multi30kError, ValueError):
    pass


class MisalignedError(Multi30kError, ValueError):
    pass


class _TruncatedDownload(Exception):
    """The connection closed before Content-Length bytes arrived (worth another try)."""


# ----------------------------------------------------------------------------- fetching: mirror, cache, download

def default_cache_dir() -> Path:
    """$MULTI30K_CACHE if set, else ~/.cache/transformer_course/multi30k (honouring $XDG_CACHE_HOME)."""
    if os.environ.get("MULTI30K_CACHE"):
        return Path(os.environ["MULTI30K_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "transformer_course" / "multi30k"


def sha256_of(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def fetch(name, *, cache_dir=None, mirror=None, base_url=BASE_URL, checksums=None,
          tries=4, backoff=1.0, timeout=30.0, progress=True) -> Path:
    """The path of a verified copy of the file `name` (e.g. "train.de.gz").

    With a mirror (the argument, else $MULTI30K_MIRROR) the file is read from that folder and the network is
    never touched. Otherwise it comes from `cache_dir`, downloaded from `base_url` when missing or corrupt.
    `checksums` maps file names to SHA-256 sums (default: the official ones).
    """
    checksums = SHA256SUMS if checksums is None else checksums
    if name not in checksums:
        raise KeyError(f"no SHA-256 known for {name!r}; known files: {sorted(checksums)}")
    expected = checksums[name]
    if mirror is None:
        mirror = os.environ.get("MULTI30K_MIRROR") or None  # set but empty counts as unset
    if mirror is not None:
        return _verified_mirror_file(Path(mirror).expanduser() / name, expected)

    path = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    path = path / name
    if path.exists():
        if sha256_of(path) == expected:
            return path
        warnings.warn(f"{path} does not match its SHA-256 (a corrupt or changed file): downloading it again", stacklevel=2)
        path.unlink()  # so that a failed download never leaves the bad file behind
    _download_with_retries(f"{base_url.rstrip('/')}/{name}", path, expected, tries, backoff, timeout, progress)
    return path


def _verified_mirror_file(path, expected) -> Path:
    if not path.parent.is_dir():
        raise MissingFileError(
            f"the Multi30k mirror {path.parent} is not a folder: point --mirror (or MULTI30K_MIRROR) at the folder "
            f"that holds the official Multi30k files ({path.name} among them), or set neither to download them.")
    if not path.is_file():
        raise MissingFileError(
            f"{path} is missing: the mirror folder {path.parent} must hold the official Multi30k files it is "
            f"asked for. Copy {path.name} there (from {BASE_URL}/{path.name}), or unset MULTI30K_MIRROR "
            f"(and pass no mirror=) to download them.")
    actual = sha256_of(path)
    if actual != expected:
        raise ChecksumError(
            f"{path} has SHA-256 {actual}, expected {expected}: it is not the official file. Replace it with "
            f"the official one from {BASE_URL}/{path.name}.")
    return path


def _download_with_retries(url, path, expected, tries, backoff, timeout, progress):
    """Network hiccups, server errors (5xx) and cut-off responses are retried, waiting backoff * 1, 2, 4, ...
    seconds; a 4xx or a complete file with the wrong checksum is not (trying again gets the same answer)."""
    if tries < 1:
        raise ValueError(f"tries must be at least 1, got {tries}")
    for attempt in range(1, tries + 1):
        try:
            return _download_once(url, path, expected, timeout, progress)
        except urllib.error.HTTPError as err:
            if err.code < 500 and err.code not in (408, 429):
                raise DownloadError(f"{url} answered HTTP {err.code} ({err.reason}). The dataset may have moved: "
                                    "download the files yourself and set MULTI30K_MIRROR to their folder.") from err
            last_error = err
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError,
                _TruncatedDownload) as err:
            last_error = err
        if attempt < tries:
            time.sleep(backoff * 2 ** (attempt - 1))
    raise DownloadError(
        f"could not download {url} after {tries} tries (last error: {last_error!r}). Check your internet "
        f"connection and run again, or put the official files in a folder and set MULTI30K_MIRROR to it.") \
        from last_error


def _download_once(url, path, expected, timeout, progress):
    """Stream `url` into a temporary file next to `path`, check it, then rename it into place: the rename is
    atomic, so `path` is either absent or complete and verified, even if we are interrupted."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        digest, received = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            size = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=size, unit="B", unit_scale=True, desc=path.name, disable=not progress) as bar:
                while chunk := response.read(1 << 16):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
        if size is not None and received < size:  # http.client returns short reads silently
            raise _TruncatedDownload(f"got {received} of {size} bytes")
        if digest.hexdigest() != expected:
            raise ChecksumError(
                f"{url} sent a file with SHA-256 {digest.hexdigest()}, expected {expected}: it is not the official "
                f"file (a proxy or login page, or the dataset changed). Nothing was saved. Download the official "
                f"file by other means and set MULTI30K_MIRROR to its folder.")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ----------------------------------------------------------------------------- reading sentences

def read_sentences(path) -> list:
    """The lines of a gzipped UTF-8 file, without their newline (and nothing else stripped)."""
    try:
        text = gzip.decompress(Path(path).read_bytes()).decode("utf-8")
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise UnreadableFileError(f"{path} is not a complete gzip file ({err}): delete it and fetch it again") from err
    except UnicodeDecodeError as err:
        raise UnreadableFileError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason}): "
                                  f"replace it with the official file") from err
    return split_lines(text)


def split_lines(text) -> list:
    """The lines of `text` without their newline. Split at "\\n" only: splitlines() also breaks at characters
    such as U+2028 inside a sentence. A final newline ends the last line; it does not start an empty one."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def load_split(split, **fetch_options):
    """(german, english): two aligned lists of sentence strings for "train", "val", "test"
    (= "test_2016_flickr") or "test_2017_flickr" (held out). `fetch_options` (cache_dir, mirror, base_url,
    checksums, ...) go to `fetch`."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    paths = [fetch(f"{SPLITS[split]}.{lang}.gz", **fetch_options) for lang in LANGS]
    german, english = (read_sentences(path) for path in paths)
    if len(german) != len(english):
        raise MisalignedError(f"{paths[0]} has {len(german)} lines but {paths[1]} has {len(english)}: the files "
                              f"are not a matching pair. Replace them with the official files.")
    return german, english


# ----------------------------------------------------------------------------- tokenising

@functools.lru_cache(maxsize=None)
def spacy_tokenizer(lang):
    """spaCy's rule-based tokenizer for `lang`. A blank pipeline needs no download, so it works offline."""
    spacy = import_extra("spacy", "tokenising")  # imported here: it takes seconds, and only tokenising needs it
    return spacy.blank(lang).tokenizer


def tokenize(sentences, lang, lowercase=False, cache_dir=None):
    """One token list per sentence. Whitespace tokens (double spaces, tabs, no-break spaces in the
    data) are dropped. With `cache_dir`, the result is kept there, keyed by the sentences themselves."""
    sentences = list(sentences)
    cache_file = _token_cache_file(sentences, lang, lowercase, cache_dir) if cache_dir is not None else None
    if cache_file is not None and cache_file.exists():
        try:
            return json.loads(cache_file.read_text(encoding="utf-8"))
        except ValueError:  # a damaged cache file is rebuilt below, never trusted
            pass
    docs = spacy_tokenizer(lang).pipe(sentences, batch_size=1000)
    tokens = [[t.lower_ if lowercase else t.text for t in doc if not t.is_space] for doc in docs]
    if cache_file is not None:
        _write_atomically(cache_file, json.dumps(tokens, ensure_ascii=False))
    return tokens


def _token_cache_file(sentences, lang, lowercase, cache_dir) -> Path:
    # Everything that changes the tokens is in the key, so a stale cache entry is never read.
    key = json.dumps([lang, lowercase, importlib.metadata.version("spacy"), sentences], ensure_ascii=False)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]
    return Path(cache_dir).expanduser() / f"tokens-{lang}{'-lower' if lowercase else ''}-{digest}.json"


def _write_atomically(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ----------------------------------------------------------------------------- vocabulary (notebook 07's exercise)

class Vocab:
    """Tokens <-> ids. `itos[id]` is a token, `stoi[token]` its id; unknown tokens encode to <unk>.

    A vocabulary is fully described by its `itos` list: save that (e.g. in a checkpoint) and rebuild
    it with `Vocab(itos)`.
    """

    def __init__(self, itos, unk=UNK):
        self.itos = list(itos)
        self.stoi = {token: i for i, token in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("itos holds a token twice")
        self.unk_id = self.stoi.get(unk)

    def __len__(self):
        return len(self.itos)

    def __repr__(self):
        return f"Vocab({len(self)} tokens: {self.itos[:8]}...)"

    def encode(self, tokens):
        if self.unk_id is None:
            return [self.stoi[token] for token in tokens]  # no <unk>: an unknown token is a KeyError
        return [self.stoi.get(token, self.unk_id) for token in tokens]

    def decode(self, ids):
        return [self.itos[int(i)] for i in ids]  # int(): accepts a list of ints or a tensor


def build_vocab(sentences, min_freq=2, specials=SPECIALS):
    """A Vocab of the specials (first, in the order given), then every token seen at least `min_freq`
    times in `sentences` (an iterable of token lists), most frequent first, ties in alphabetical order."""
    if min_freq < 1:
        raise ValueError(f"min_freq must be at least 1, got {min_freq}")
    if len(set(specials)) != len(specials):
        raise ValueError(f"specials must be distinct, got {specials}")
    counts = Counter()
    for tokens in sentences:
        if isinstance(tokens, str):  # Counter would count its characters
            raise ValueError(f"sentences must be token lists, got the string {tokens!r}: tokenize it first")
        counts.update(tokens)
    frequent = [token for token, n in counts.items() if n >= min_freq and token not in specials]
    frequent.sort(key=lambda token: (-counts[token], token))
    return Vocab([*specials, *frequent])


# ----------------------------------------------------------------------------- dataset, batches, padding

class TranslationDataset(Dataset):
    """Encoded sentence pairs as LongTensors: source = tokens <eos>, target = <bos> tokens <eos>.

    The decoder needs <bos> to start from and <eos> to learn to stop; the source gets <eos> too, as in the
    paper's tensor2tensor code, so the encoder sees where the sentence ends. The token lists stay
    available (`src_tokens`, `tgt_tokens`), e.g. as BLEU references.
    """

    def __init__(self, src_tokens, tgt_tokens, src_vocab, tgt_vocab):
        if len(src_tokens) != len(tgt_tokens):
            raise ValueError(f"{len(src_tokens)} source sentences but {len(tgt_tokens)} target sentences")
        self.src_tokens, self.tgt_tokens = src_tokens, tgt_tokens
        src_eos, (tgt_bos, tgt_eos) = src_vocab.stoi[EOS], (tgt_vocab.stoi[BOS], tgt_vocab.stoi[EOS])
        src_ids = [src_vocab.encode(tokens) + [src_eos] for tokens in src_tokens]
        tgt_ids = [[tgt_bos] + tgt_vocab.encode(tokens) + [tgt_eos] for tokens in tgt_tokens]
        # (source length, target length) of every pair, specials included: what the batches are cut by
        self.lengths = [(len(s), len(t)) for s, t in zip(src_ids, tgt_ids)]
        self.src = [torch.tensor(ids) for ids in src_ids]
        self.tgt = [torch.tensor(ids) for ids in tgt_ids]

    def __len__(self):
        return len(self.src)

    def __getitem__(self, i):
        return self.src[i], self.tgt[i]


class TokenBatchSampler(Sampler):
    """Batches of indices cut by a token budget, like the paper's batches of ~25,000 source and ~25,000
    target tokens (section 5.1).

    A batch of B pairs is padded to its longest source S and longest target T, so it costs B*S source and
    B*T target tokens; every batch keeps both within `max_tokens`. To waste little on padding, pairs of
    similar length go together: with `shuffle`, each epoch shuffles the data, sorts it by length within
    pools of `pool_size` pairs (big enough to find similar lengths, small enough to stay random), cuts
    the pools into batches and shuffles the batches. Epoch e of a given `seed` is always the same; each
    pass (`iter`) moves on to the next epoch, and `set_epoch` picks one. Without `shuffle` the data keeps
    its order (handy for evaluation: concatenated batches line up with the references).
    """

    def __init__(self, lengths, max_tokens, shuffle=True, pool_size=4096, seed=0):
        super().__init__()
        self.lengths = [(int(s), int(t)) for s, t in lengths]
        self.max_tokens, self.shuffle, self.pool_size, self.seed = max_tokens, shuffle, pool_size, seed
        self.epoch = 0
        too_long = [i for i, pair in enumerate(self.lengths) if max(pair) > max_tokens]
        if too_long:
            raise ValueError(f"{len(too_long)} pairs are longer than max_tokens={max_tokens} on their own "
                             f"(the first: index {too_long[0]}, lengths {self.lengths[too_long[0]]}): "
                             "raise max_tokens or drop those pairs")
        self._memo = (None, None)  # (epoch, batches) of the last epoch computed

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        batches = self.batches(self.epoch)
        self.epoch += 1
        return iter(batches)

    def __len__(self):
        """The number of batches of the next pass (it can differ a little from epoch to epoch)."""
        return len(self.batches(self.epoch))

    def batches(self, epoch):
        """The list of batches (lists of indices) of `epoch`."""
        if self._memo[0] != epoch:
            self._memo = (epoch, self._make_batches(epoch))
        return self._memo[1]

    def _make_batches(self, epoch):
        if not self.shuffle:
            return self._cut(range(len(self.lengths)))
        rng = np.random.default_rng([self.seed, epoch])  # one independent stream per (seed, epoch)
        order = rng.permutation(len(self.lengths)).tolist()
        batches = []
        for start in range(0, len(order), self.pool_size):
            pool = order[start:start + self.pool_size]
            batches += self._cut(sorted(pool, key=lambda i: (max(self.lengths[i]), self.lengths[i])))
        return [batches[i] for i in rng.permutation(len(batches))]

    def _cut(self, indices):
        """Greedy: add pairs to the batch while its padded size stays within the budget."""
        batches, batch, longest = [], [], 0
        for i in indices:
            length = max(self.lengths[i])
            if batch and (len(batch) + 1) * max(longest, length) > self.max_tokens:
                batches.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, length)
        if batch:
            batches.append(batch)
        return batches


def collate_batch(pairs, src_pad_id=0, tgt_pad_id=0):
    """[(src, tgt), ...] -> (src [B, S], tgt [B, T]) LongTensors, padded on the right with the pad ids."""
    src, tgt = zip(*pairs)
    return (pad_sequence(src, batch_first=True, padding_value=src_pad_id),
            pad_sequence(tgt, batch_first=True, padding_value=tgt_pad_id))


def main(argv=None):
    """`python -m transformer_course.data`: fetch and verify the six files the course trains and tests on, and
    the held-out test_2017_flickr that `reproduce` scores last (e.g. before going offline)."""
    import argparse
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--cache-dir", help="download cache (default: $MULTI30K_CACHE or ~/.cache/...)")
    parser.add_argument("--mirror", help="read the files from this folder instead (default: $MULTI30K_MIRROR)")
    args = parser.parse_args(argv)
    for split in COURSE_SPLITS:
        german, english = load_split(split, cache_dir=args.cache_dir, mirror=args.mirror)
        print(f"{split:16s} {len(german):6d} pairs, e.g. {german[0]!r} -> {english[0]!r}")
    print("the six files present and verified")
    try:
        german, _ = load_split(HELD_OUT, cache_dir=args.cache_dir, mirror=args.mirror)
    except Multi30kError as error:
        print(f"{HELD_OUT} (held out, optional): not had ({error}); reproduce leaves its score out")
    else:
        print(f"{HELD_OUT} (held out) {len(german)} pairs, present and verified")


if __name__ == "__main__":
    main()
