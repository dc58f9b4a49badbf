"""The Multi30k pipeline: fetching (mirror, cache, download), reading, tokenising, vocabulary, length-bucketed
batches and padding.

Everything runs offline on small gzip files the tests write themselves, with their own checksums; downloads
go to an HTTP server on 127.0.0.1 that fails, truncates or corrupts on demand. The real files are checked
when the course's mirror is present ($MULTI30K_MIRROR, else ../shared/data/multi30k next to the repository).
"""
import gzip
import hashlib
import http.server
import os
import socket
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import torch
from support.builders import add_held_out_stand_in, mirror_of_six

from transformer_course import data
from transformer_course.data import (
    SHA256SUMS,
    ChecksumError,
    DownloadError,
    MisalignedError,
    MissingFileError,
    TokenBatchSampler,
    TranslationDataset,
    UnreadableFileError,
    Vocab,
    build_vocab,
    collate_batch,
    fetch,
    load_split,
    read_sentences,
    tokenize,
)
from transformer_course.run.batches import multi30k_dataloaders

REAL_MIRROR = Path(os.environ.get("MULTI30K_MIRROR", ""))  # conftest.py sets it when ../shared holds the mirror

# Three tiny splits. "Katze"/"cat" appear in train once only, "Vogel"/"bird" only in val.
SMALL = {
    "train": (["Ein Hund läuft.", "Ein Hund schläft.", "Eine Katze läuft.", "Ein  Mann läuft."],
              ["A dog runs.", "A dog sleeps.", "A cat runs.", "A man runs."]),
    "val": (["Ein Vogel läuft.", "Ein Hund läuft schnell weg."], ["A bird runs.", "A dog runs away quickly."]),
    "test_2016_flickr": (["Ein Mann schläft."], ["A man sleeps."]),
}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """The caller's settings must not leak in, and no test may reach anything but 127.0.0.1."""
    monkeypatch.delenv("MULTI30K_MIRROR", raising=False)
    monkeypatch.delenv("MULTI30K_CACHE", raising=False)
    real_urlopen = urllib.request.urlopen

    def localhost_only(url, *args, **kwargs):
        host = urllib.parse.urlsplit(url if isinstance(url, str) else url.full_url).hostname
        assert host == "127.0.0.1", f"a test tried to reach {url}"
        return real_urlopen(url, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", localhost_only)


# ----------------------------------------------------------------------------- helpers

def gz_bytes(lines):
    return gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), mtime=0)


def sha256(blob):
    return hashlib.sha256(blob).hexdigest()


def write_mirror(folder, splits=SMALL):
    """Write the splits as <split>.<lang>.gz into `folder`; return their checksums."""
    folder.mkdir(parents=True, exist_ok=True)
    checksums = {}
    for split, pair in splits.items():
        for lang, lines in zip(("de", "en"), pair):
            blob = gz_bytes(lines)
            (folder / f"{split}.{lang}.gz").write_bytes(blob)
            checksums[f"{split}.{lang}.gz"] = sha256(blob)
    return checksums


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Handler(http.server.BaseHTTPRequestHandler):
    """Answers GET /<name> with the next planned response for <name>; the last one repeats."""

    def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        self.server.requests.append(name)
        plan = self.server.plan.get(name, [(404, b"")])
        status, body = plan.pop(0) if len(plan) > 1 else plan[0]
        if status != 200:
            self.send_error(status)
            return
        truncated = body == "truncated"
        body = self.server.files[name] if body in ("good", "truncated") else body
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if truncated else body)  # then the connection closes

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """An HTTP/1.0 server on 127.0.0.1 in a thread. Set `server.plan[name]` to a list of responses:
    (200, "good"), (200, "truncated"), (200, b"other bytes") or (status, b"")."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.files = {"val.de.gz": gz_bytes(SMALL["val"][0]), "val.en.gz": gz_bytes(SMALL["val"][1])}
    httpd.checksums = {name: sha256(blob) for name, blob in httpd.files.items()}
    httpd.plan, httpd.requests = {}, []
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}/raw"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def download(server, cache_dir, name="val.de.gz", **options):
    options = {"tries": 3, "backoff": 0, "timeout": 5, "progress": False, **options}
    return fetch(name, cache_dir=cache_dir, base_url=server.url, checksums=server.checksums, **options)


def files_in(folder):
    return sorted(p.name for p in folder.iterdir())


# ----------------------------------------------------------------------------- downloading

def test_download_saves_verified_file_and_then_uses_the_cache(server, tmp_path):
    server.plan["val.de.gz"] = [(200, "good")]
    path = download(server, tmp_path)
    assert path == tmp_path / "val.de.gz" and path.read_bytes() == server.files["val.de.gz"]
    assert download(server, tmp_path) == path
    assert server.requests == ["val.de.gz"], "a verified cached file must not be downloaded again"
    assert files_in(tmp_path) == ["val.de.gz"], "no temporary file may stay behind"


def test_download_retries_server_errors_with_growing_waits(server, tmp_path, monkeypatch):
    waits = []
    monkeypatch.setattr(data.time, "sleep", waits.append)
    server.plan["val.de.gz"] = [(503, b""), (500, b""), (200, "good")]
    path = download(server, tmp_path, tries=3, backoff=0.5)
    assert path.read_bytes() == server.files["val.de.gz"]
    assert len(server.requests) == 3
    assert waits == [0.5, 1.0]


def test_download_gives_up_after_the_retries_and_says_what_to_do(server, tmp_path):
    server.plan["val.de.gz"] = [(503, b"")]
    with pytest.raises(DownloadError, match=r"after 3 tries.*MULTI30K_MIRROR"):
        download(server, tmp_path, tries=3)
    assert len(server.requests) == 3
    assert files_in(tmp_path) == []


def test_a_missing_url_is_not_retried(server, tmp_path):
    server.plan["val.de.gz"] = [(404, b"")]
    with pytest.raises(DownloadError, match="404"):
        download(server, tmp_path, tries=3)
    assert len(server.requests) == 1


def test_an_unreachable_server_is_a_download_error(tmp_path):
    with pytest.raises(DownloadError, match="after 2 tries"):
        fetch("val.de.gz", cache_dir=tmp_path, base_url=f"http://127.0.0.1:{closed_port()}", tries=2, backoff=0,
              timeout=5, progress=False)
    assert files_in(tmp_path) == []


def test_corrupt_bytes_raise_a_checksum_error_and_leave_nothing_in_the_cache(server, tmp_path):
    good = server.files["val.de.gz"]
    server.plan["val.de.gz"] = [(200, good[:-1] + bytes([good[-1] ^ 1]))]  # same length, one bit flipped
    with pytest.raises(ChecksumError, match="SHA-256"):
        download(server, tmp_path)
    assert files_in(tmp_path) == []


def test_a_truncated_response_is_retried(server, tmp_path):
    server.plan["val.de.gz"] = [(200, "truncated"), (200, "good")]
    assert download(server, tmp_path).read_bytes() == server.files["val.de.gz"]
    assert len(server.requests) == 2


def test_truncated_responses_only_leave_nothing_in_the_cache(server, tmp_path):
    server.plan["val.de.gz"] = [(200, "truncated")]
    with pytest.raises(DownloadError, match="after 2 tries"):
        download(server, tmp_path, tries=2)
    assert files_in(tmp_path) == []


def test_a_corrupt_cached_file_is_downloaded_again(server, tmp_path):
    (tmp_path / "val.de.gz").write_bytes(b"half a file")
    server.plan["val.de.gz"] = [(200, "good")]
    with pytest.warns(UserWarning, match="downloading it again"):
        path = download(server, tmp_path)
    assert path.read_bytes() == server.files["val.de.gz"]
    assert server.requests == ["val.de.gz"]


def test_a_corrupt_cached_file_is_removed_even_when_the_download_fails(server, tmp_path):
    (tmp_path / "val.de.gz").write_bytes(b"half a file")
    server.plan["val.de.gz"] = [(503, b"")]
    with pytest.warns(UserWarning), pytest.raises(DownloadError):
        download(server, tmp_path, tries=1)
    assert files_in(tmp_path) == []


def test_the_cache_folder_comes_from_the_environment(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTI30K_CACHE", str(tmp_path / "from-env"))
    server.plan["val.de.gz"] = [(200, "good")]
    path = fetch("val.de.gz", base_url=server.url, checksums=server.checksums, progress=False)
    assert path == tmp_path / "from-env" / "val.de.gz" and path.exists()


def test_the_default_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert data.default_cache_dir() == tmp_path / "transformer_course" / "multi30k"


def test_load_split_downloads_both_languages(server, tmp_path):
    server.plan = {"val.de.gz": [(200, "good")], "val.en.gz": [(200, "good")]}
    german, english = load_split("val", cache_dir=tmp_path, base_url=server.url, checksums=server.checksums,
                                 backoff=0, timeout=5, progress=False)
    assert (german, english) == SMALL["val"]
    assert files_in(tmp_path) == ["val.de.gz", "val.en.gz"]


# ----------------------------------------------------------------------------- the mirror and reading

def test_the_mirror_gives_aligned_sentences(tmp_path):
    checksums = write_mirror(tmp_path / "mirror")
    for split in ("train", "val"):
        assert load_split(split, mirror=tmp_path / "mirror", checksums=checksums) == SMALL[split]
    assert load_split("test", mirror=tmp_path / "mirror", checksums=checksums) == SMALL["test_2016_flickr"]


def test_the_mirror_comes_from_the_environment(tmp_path, monkeypatch):
    checksums = write_mirror(tmp_path / "mirror")
    monkeypatch.setenv("MULTI30K_MIRROR", str(tmp_path / "mirror"))
    assert load_split("val", cache_dir=tmp_path / "cache", checksums=checksums) == SMALL["val"]
    assert not (tmp_path / "cache").exists(), "with a mirror nothing is downloaded or cached"


def test_a_file_missing_from_the_mirror_is_named(tmp_path):
    checksums = write_mirror(tmp_path)
    (tmp_path / "val.en.gz").unlink()
    with pytest.raises(MissingFileError, match=r"val\.en\.gz is missing.*MULTI30K_MIRROR"):
        load_split("val", mirror=tmp_path, checksums=checksums)
    assert issubclass(MissingFileError, FileNotFoundError)


def test_a_wrong_file_in_the_mirror_fails_its_checksum(tmp_path):
    checksums = write_mirror(tmp_path)
    (tmp_path / "val.en.gz").write_bytes(gz_bytes(["Something else entirely."]))
    with pytest.raises(ChecksumError, match=r"val\.en\.gz has SHA-256"):
        load_split("val", mirror=tmp_path, checksums=checksums)


def test_the_official_checksums_apply_by_default(tmp_path):
    write_mirror(tmp_path)  # our small files are not the official ones
    with pytest.raises(ChecksumError):
        load_split("val", mirror=tmp_path)


def test_misaligned_files_are_refused(tmp_path):
    checksums = write_mirror(tmp_path, {"val": (["Ein Hund.", "Eine Katze."], ["A dog."])})
    with pytest.raises(MisalignedError, match="2 lines.*has 1"):
        load_split("val", mirror=tmp_path, checksums=checksums)


@pytest.mark.parametrize("blob, message", [
    (gzip.compress("Straße\n".encode("latin-1"), mtime=0), "not UTF-8"),
    (b"plain text, not gzip\n", "not a complete gzip file"),
    (gz_bytes(["Ein Hund."] * 200)[:-12], "not a complete gzip file"),  # cut off before the end
], ids=["latin-1", "not-gzip", "cut-off-gzip"])
def test_unreadable_files_are_refused(tmp_path, blob, message):
    (tmp_path / "val.de.gz").write_bytes(blob)
    (tmp_path / "val.en.gz").write_bytes(gz_bytes(["A dog."]))
    checksums = {name: sha256((tmp_path / name).read_bytes()) for name in ("val.de.gz", "val.en.gz")}
    with pytest.raises(UnreadableFileError, match=message):
        load_split("val", mirror=tmp_path, checksums=checksums)


def test_only_the_newline_is_stripped(tmp_path):
    path = tmp_path / "lines.gz"
    path.write_bytes(gzip.compress(" Ein  Hund \n\nline\u2028separator\tinside\nno final newline".encode()))
    assert read_sentences(path) == [" Ein  Hund ", "", "line\u2028separator\tinside", "no final newline"]


def test_an_unknown_split_is_refused(tmp_path):
    with pytest.raises(ValueError, match="split must be one of"):
        load_split("dev", mirror=tmp_path)


# ----------------------------------------------------------------------------- the real files, when present

needs_real_mirror = pytest.mark.skipif(
    not (REAL_MIRROR / "train.de.gz").exists(),
    reason=f"the Multi30k mirror is not at {REAL_MIRROR}: set MULTI30K_MIRROR to a folder with the official files")


@needs_real_mirror
def test_the_mirror_checksums_are_the_packages():
    listed = dict(reversed(line.split()) for line in (REAL_MIRROR / "SHA256SUMS").read_text().splitlines())
    assert listed == {name: SHA256SUMS[name] for name in listed}, "a mirror file with another checksum"
    trained_on = {f"{split}.{lang}.gz" for split in data.COURSE_SPLITS for lang in data.LANGS}
    assert trained_on <= set(listed), "the mirror lacks a file the course trains or tests on"
    assert set(SHA256SUMS) - set(listed) <= {f"{data.HELD_OUT}.{lang}.gz" for lang in data.LANGS}


@needs_real_mirror
def test_the_real_splits_have_the_published_sizes():
    sizes = {split: len(load_split(split, mirror=REAL_MIRROR)[0]) for split in ("train", "val", "test")}
    assert sizes == {"train": 29000, "val": 1014, "test": 1000}
    assert sizes == {split: data.LINE_COUNTS[data.SPLITS[split]] for split in sizes}


@needs_real_mirror
def test_the_data_command_verifies_the_six_files_and_says_whether_it_has_the_held_out_set(tmp_path, capsys,
                                                                                          monkeypatch):
    mirror_of_six(tmp_path, REAL_MIRROR)
    data.main(["--mirror", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "the six files present and verified" in printed
    assert "test_2017_flickr (held out, optional): not had" in printed and "test_2017_flickr.de.gz is missing" in printed
    add_held_out_stand_in(tmp_path, [("eins", "one"), ("zwei", "two")], monkeypatch)
    data.main(["--mirror", str(tmp_path)])
    assert "test_2017_flickr (held out) 2 pairs, present and verified" in capsys.readouterr().out


@needs_real_mirror
def test_the_first_validation_pair():
    german, english = load_split("val", mirror=REAL_MIRROR)
    assert german[0] == "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"
    assert english[0] == "A group of men are loading cotton onto a truck"
    assert tokenize(english[:1], "en") == [["A", "group", "of", "men", "are", "loading", "cotton", "onto", "a",
                                            "truck"]]


# ----------------------------------------------------------------------------- tokenising

def test_tokenize_splits_punctuation_and_drops_whitespace():
    assert tokenize(["Ein  Hund,\u00a0der läuft. "], "de") == [["Ein", "Hund", ",", "der", "läuft", "."]]
    assert tokenize(["A dog doesn't run."], "en") == [["A", "dog", "does", "n't", "run", "."]]


def test_tokenize_can_lowercase():
    assert tokenize(["Ein Hund"], "de", lowercase=True) == [["ein", "hund"]]


def test_tokens_are_cached_by_content_and_options(tmp_path, monkeypatch):
    sentences = ["Ein Hund läuft.", "Eine Katze."]
    first = tokenize(sentences, "de", cache_dir=tmp_path)
    assert len(list(tmp_path.glob("tokens-de-*.json"))) == 1

    def no_spacy(lang):
        raise AssertionError("spaCy was called although the tokens are cached")

    monkeypatch.setattr(data, "spacy_tokenizer", no_spacy)
    assert tokenize(sentences, "de", cache_dir=tmp_path) == first
    with pytest.raises(AssertionError, match="cached"):  # other options or sentences are other entries
        tokenize(sentences, "de", lowercase=True, cache_dir=tmp_path)
    with pytest.raises(AssertionError, match="cached"):
        tokenize(sentences[:1], "de", cache_dir=tmp_path)


def test_a_damaged_token_cache_is_rebuilt(tmp_path):
    first = tokenize(["Ein Hund läuft."], "de", cache_dir=tmp_path)
    [cache_file] = tmp_path.glob("tokens-*.json")
    cache_file.write_text("[[\"Ein\", ")
    assert tokenize(["Ein Hund läuft."], "de", cache_dir=tmp_path) == first
    assert tokenize(["Ein Hund läuft."], "de", cache_dir=tmp_path) == first  # rewritten whole


# ----------------------------------------------------------------------------- vocabulary

SENTENCES = [["b", "a", "c"], ["a", "b", "d"], ["c", "e"], ["a"]]  # a: 3, b: 2, c: 2, d: 1, e: 1


def test_vocab_order_specials_then_count_then_alphabet():
    assert build_vocab(SENTENCES).itos == ["<pad>", "<unk>", "<bos>", "<eos>", "a", "b", "c"]
    assert build_vocab(SENTENCES, min_freq=1).itos == ["<pad>", "<unk>", "<bos>", "<eos>", "a", "b", "c", "d", "e"]
    assert build_vocab(SENTENCES, min_freq=3, specials=("<unk>", "<pad>")).itos == ["<unk>", "<pad>", "a"]


def test_vocab_takes_any_iterable_and_never_repeats_a_special():
    vocab = build_vocab(iter([["<eos>", "x"], ["x", "<eos>"]]))
    assert vocab.itos == ["<pad>", "<unk>", "<bos>", "<eos>", "x"]


def test_vocab_lookups_encode_and_decode():
    vocab = build_vocab(SENTENCES)
    assert len(vocab) == 7
    assert all(vocab.stoi[token] == i for i, token in enumerate(vocab.itos))
    assert vocab.encode(["c", "a", "zebra", "d"]) == [6, 4, 1, 1]  # unseen and rare tokens are <unk>
    assert vocab.decode([6, 4, 1]) == ["c", "a", "<unk>"]
    assert vocab.decode(torch.tensor([2, 5, 3])) == ["<bos>", "b", "<eos>"]
    assert vocab.decode(vocab.encode(["a", "b", "c"])) == ["a", "b", "c"]
    assert Vocab(vocab.itos).stoi == vocab.stoi


def test_build_vocab_refuses_strings_and_bad_min_freq():
    with pytest.raises(ValueError, match="token lists"):
        build_vocab(["a dog", "a cat"])
    with pytest.raises(ValueError, match="min_freq"):
        build_vocab(SENTENCES, min_freq=0)


# ----------------------------------------------------------------------------- dataset and padding

def test_dataset_adds_eos_to_the_source_and_bos_eos_to_the_target():
    src_vocab, tgt_vocab = build_vocab([["x", "y"]], min_freq=1), build_vocab([["p", "q"]], min_freq=1)
    dataset = TranslationDataset([["x", "y", "z"]], [["q"]], src_vocab, tgt_vocab)
    src, tgt = dataset[0]
    assert src.tolist() == [4, 5, 1, 3] and tgt.tolist() == [2, 5, 3]
    assert src.dtype == tgt.dtype == torch.long
    assert dataset.lengths == [(4, 3)] and len(dataset) == 1


def test_collate_pads_on_the_right_with_each_sides_pad_id():
    pairs = [(torch.tensor([5, 6, 7]), torch.tensor([2, 9, 3])), (torch.tensor([8]), torch.tensor([2, 9, 9, 9, 3]))]
    src, tgt = collate_batch(pairs, src_pad_id=0, tgt_pad_id=1)
    assert src.dtype == tgt.dtype == torch.long
    assert src.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert tgt.tolist() == [[2, 9, 3, 1, 1], [2, 9, 9, 9, 3]]


# ----------------------------------------------------------------------------- length-bucketed batches

def random_lengths(n=2000, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, 50, (n,), generator=g)
    return list(zip(src.tolist(), (src + torch.randint(-5, 6, (n,), generator=g)).clamp(min=1).tolist()))


def padded_size(batch, lengths):
    """(source, target) tokens of the batch once padded."""
    return (len(batch) * max(lengths[i][0] for i in batch), len(batch) * max(lengths[i][1] for i in batch))


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_batch_keeps_within_the_token_budget(shuffle):
    lengths = random_lengths()
    sampler = TokenBatchSampler(lengths, max_tokens=300, shuffle=shuffle, pool_size=500)
    batches = list(sampler)
    assert all(max(padded_size(b, lengths)) <= 300 for b in batches)
    assert max(max(padded_size(b, lengths)) for b in batches) > 250, "batches should fill most of the budget"


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_example_is_in_exactly_one_batch(shuffle):
    sampler = TokenBatchSampler(random_lengths(), max_tokens=300, shuffle=shuffle, pool_size=500)
    for _ in range(2):  # two epochs
        assert sorted(i for batch in sampler for i in batch) == list(range(2000))


def test_batches_are_reproducible_per_seed_and_epoch():
    lengths = random_lengths()
    a, b, c = (TokenBatchSampler(lengths, 300, pool_size=500, seed=seed) for seed in (1, 1, 2))
    epoch0 = list(a)
    assert list(b) == epoch0
    assert list(c) != epoch0
    assert list(a) != epoch0, "the next pass is the next epoch, in another order"
    a.set_epoch(0)
    assert list(a) == epoch0


def test_len_is_the_number_of_batches_of_the_next_pass():
    sampler = TokenBatchSampler(random_lengths(), 300, pool_size=500)
    for _ in range(3):
        expected = len(sampler)
        assert len(list(sampler)) == expected


def test_bucketing_wastes_less_padding_than_batches_in_random_order():
    lengths = random_lengths()
    real_tokens = sum(s + t for s, t in lengths)

    def padding_fraction(batches):
        return 1 - real_tokens / sum(sum(padded_size(b, lengths)) for b in batches)

    bucketed = padding_fraction(TokenBatchSampler(lengths, 600, shuffle=True, pool_size=1000))
    in_order = padding_fraction(TokenBatchSampler(lengths, 600, shuffle=False))  # random lengths, file order
    assert bucketed < 0.1 < in_order


def test_the_batches_themselves_are_shuffled():
    """One pool sorts everything by length; the batches cut from it must not come out in that order."""
    lengths = random_lengths()
    batches = list(TokenBatchSampler(lengths, 300, pool_size=len(lengths)))
    longest = [max(max(lengths[i]) for i in batch) for batch in batches]
    assert longest != sorted(longest)


def test_without_shuffle_the_order_is_kept():
    batches = list(TokenBatchSampler(random_lengths(), 300, shuffle=False))
    assert [i for batch in batches for i in batch] == list(range(2000))


def test_a_pair_longer_than_the_budget_is_refused():
    with pytest.raises(ValueError, match="max_tokens=10"):
        TokenBatchSampler([(3, 4), (5, 11)], max_tokens=10)


# ----------------------------------------------------------------------------- everything at once

def test_multi30k_dataloaders_end_to_end(tmp_path):
    checksums = write_mirror(tmp_path / "mirror")
    mt = multi30k_dataloaders(max_tokens=40, min_freq=2, mirror=tmp_path / "mirror", checksums=checksums,
                              cache_dir=tmp_path / "cache")
    assert mt.src_vocab.itos[4:] == [".", "Ein", "läuft", "Hund"]  # from train only; "Katze" is seen once
    assert mt.tgt_vocab.itos[4:] == [".", "A", "runs", "dog"]
    assert list(tmp_path.glob("cache/tokens/tokens-*.json")), "tokens are cached"
    train_batches = list(mt.train)
    assert sum(src.size(0) for src, _ in train_batches) == 4
    for src, tgt in train_batches:
        assert src.dtype == tgt.dtype == torch.long and src.size(0) == tgt.size(0)
        assert src.numel() <= 40 and tgt.numel() <= 40
    src, tgt = next(iter(mt.val))  # val keeps the file order
    assert mt.src_vocab.decode(src[0]) == ["Ein", "<unk>", "läuft", ".", "<eos>", "<pad>", "<pad>"]
    assert mt.tgt_vocab.decode(tgt[0])[:4] == ["<bos>", "A", "<unk>", "runs"]
    assert tgt[0, -1] == mt.tgt_vocab.stoi["<pad>"] and tgt[1, -1] == mt.tgt_vocab.stoi["<eos>"]
