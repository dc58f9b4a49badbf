"""`python -m transformer_course.evaluate`: a Multi30k split or a test set of one's own (--src, --ref)
translated with a tiny checkpoint and scored, and a one-line error for every bad input.

The Multi30k cases read the mirror ($MULTI30K_MIRROR, else ../shared/data/multi30k next to the repository)
and are skipped without it; the rest makes its own sentences.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch

from transformer_course import Transformer
from transformer_course.data import SPECIALS, Vocab, load_split, tokenize
from transformer_course.evaluate import main
from transformer_course.run.checkpoints import load_checkpoint, save_checkpoint

REAL_MIRROR = Path(os.environ.get("MULTI30K_MIRROR") or Path(__file__).resolve().parents[2] / "shared/data/multi30k")
needs_mirror = pytest.mark.skipif(not (REAL_MIRROR / "test_2016_flickr.en.gz").exists(), reason="no Multi30k mirror")

GERMAN = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch.", "Kinder spielen."]
ENGLISH = ["A man rides a bike.", "Two dogs play in the snow.", "A woman reads a book.", "Children are playing."]
QUIET = ["--no-progress", "--device", "cpu", "--max-extra", "5"]


def tiny_checkpoint(path, german, english):
    """An untrained tiny Transformer whose vocabularies are the lowercased tokens of the sentences."""
    src_vocab = Vocab(list(SPECIALS) + sorted({t for s in tokenize(german, "de", True) for t in s}))
    tgt_vocab = Vocab(list(SPECIALS) + sorted({t for s in tokenize(english, "en", True) for t in s}))
    kwargs = dict(src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab), d_model=16, n_heads=2,
                  num_encoder_layers=1, num_decoder_layers=1, d_ff=32, pad_idx=0)
    torch.manual_seed(0)
    return save_checkpoint(path, Transformer(**kwargs), src_vocab, tgt_vocab,
                           {"model": kwargs, "data": {"lowercase": True}})


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def own_test_set(tmp_path):
    """(checkpoint, src, ref): a tiny checkpoint and a test set of four sentences."""
    return (str(tiny_checkpoint(tmp_path / "tiny.pt", GERMAN, ENGLISH)), write_lines(tmp_path / "test.de", GERMAN),
            write_lines(tmp_path / "test.en", ENGLISH))


@needs_mirror
def test_evaluate_command_line(tmp_path, capsys):
    german, english = load_split("train", mirror=REAL_MIRROR)
    path = tiny_checkpoint(tmp_path / "tiny.pt", german[:200], english[:200])
    hypotheses, scores = tmp_path / "hyp.txt", tmp_path / "scores.json"
    report = main([str(path), "--split", "val", "--limit", "4", "--beam", "2", "--max-extra", "5", "--mirror",
                   str(REAL_MIRROR), "--output", str(hypotheses), "--json", str(scores), "--no-progress",
                   "--device", "cpu"])
    printed = capsys.readouterr().out
    assert "sacreBLEU" in printed and "nrefs:1|case:mixed|eff:no|tok:13a" in printed
    assert "lowercased tokenised BLEU" in printed and "case:lc" in printed
    lines = hypotheses.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and report.n_sentences == 4
    references = [" ".join(s.split()) for s in load_split("val", mirror=REAL_MIRROR)[1][:4]]
    assert report.sacrebleu == pytest.approx(sacrebleu.corpus_bleu(lines, [references]).score)
    saved = json.loads(scores.read_text())
    assert saved["sacrebleu"] == pytest.approx(report.sacrebleu) and saved["beam"] == 2 and saved["lowercased_model"]


def test_a_test_set_of_ones_own_is_translated_and_scored(own_test_set, tmp_path, capsys):
    checkpoint, src, ref = own_test_set
    hypotheses, scores = tmp_path / "hyp.txt", tmp_path / "scores.json"
    report = main([checkpoint, "--src", src, "--ref", ref, "--beam", "2", "--output", str(hypotheses),
                   "--json", str(scores), *QUIET])
    printed = capsys.readouterr().out
    assert f"4 sentences of {src} (references: {ref})" in printed and "lowercased tokenised BLEU" in printed
    lines = hypotheses.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and report.n_sentences == 4
    assert report.sacrebleu == pytest.approx(sacrebleu.corpus_bleu(lines, [ENGLISH]).score)
    saved = json.loads(scores.read_text())
    assert saved["src"] == src and saved["ref"] == ref and saved["split"] is None
    assert saved["tokenized_lower_bleu"] == pytest.approx(report.tokenized_lower)


@needs_mirror
def test_a_test_set_of_ones_own_scores_exactly_like_the_same_sentences_of_multi30k(tmp_path, capsys):
    german, english = load_split("val", mirror=REAL_MIRROR)
    checkpoint = str(tiny_checkpoint(tmp_path / "tiny.pt", german[:300], english[:300]))
    src, ref = write_lines(tmp_path / "val.de", german[:6]), write_lines(tmp_path / "val.en", english[:6])
    own = main([checkpoint, "--src", src, "--ref", ref, "--output", str(tmp_path / "own.txt"), *QUIET])
    split = main([checkpoint, "--split", "val", "--limit", "6", "--mirror", str(REAL_MIRROR),
                  "--output", str(tmp_path / "split.txt"), *QUIET])
    capsys.readouterr()
    assert own == split
    assert (tmp_path / "own.txt").read_text() == (tmp_path / "split.txt").read_text()


def bad_checkpoints(folder, checkpoint):
    """name -> path of the files people pass where a checkpoint belongs."""
    run = folder / "run"
    run.mkdir()
    (run / "log.json").write_text(json.dumps({"steps": []}))
    (folder / "notes.pt").write_text("my best model\n")
    torch.save(load_checkpoint(checkpoint)["model"].state_dict(), folder / "weights.pt")
    return {"missing": folder / "nothing.pt", "folder": run, "log.json": run / "log.json",
            "text named .pt": folder / "notes.pt", "bare state dict": folder / "weights.pt"}


@pytest.mark.parametrize("case, expected", [
    ("missing", "nothing.pt does not exist: name a checkpoint written by python -m transformer_course.train"),
    ("folder", "run is a folder, not a checkpoint file"),
    ("log.json", "log.json is not a checkpoint: it is a text file"),
    ("text named .pt", "notes.pt is not a checkpoint: it is a text file"),
    ("bare state dict", "weights.pt holds model weights only (a state_dict), without the model's settings and "
                        "vocabularies"),
])
def test_what_is_not_a_checkpoint_is_named_in_one_line(own_test_set, tmp_path, refused, case, expected):
    checkpoint, src, ref = own_test_set
    path = bad_checkpoints(tmp_path, checkpoint)[case]
    assert expected in refused(main, [str(path), "--src", src, "--ref", ref, *QUIET])


@pytest.mark.parametrize("options, expected", [
    (["--src", "{src}"], "--src and --ref go together"),
    (["--src", "{src}", "--ref", "{ref}", "--split", "val"], "--split and --src/--ref choose the test set"),
    (["--src", "{tmp}/none.de", "--ref", "{ref}"], "none.de does not exist: give a text file, one sentence a line"),
    (["--src", "{src}", "--ref", "{tmp}/three.en"], "has 4 lines but --ref {tmp}/three.en has 3"),
    (["--src", "{tmp}/latin1.de", "--ref", "{ref}"], "latin1.de is not UTF-8 text (byte 10"),
    (["--src", "{tmp}/empty.de", "--ref", "{tmp}/empty.en"], "are empty: give one sentence a line"),
    (["--split", "val", "--mirror", "{tmp}/no-mirror"], "the Multi30k mirror {tmp}/no-mirror is not a folder"),
    (["--beam", "0"], "--beam must be at least 1, got 0"),
    (["--output", "{tmp}/no/such/folder/hyp.txt"], "the folder {tmp}/no/such/folder does not exist"),
    (["--device", "warp"], "unknown device 'warp': use auto, cpu, cuda, cuda:N or mps"),
])
def test_bad_options_are_named_in_one_line(own_test_set, tmp_path, refused, options, expected):
    checkpoint, src, ref = own_test_set
    write_lines(tmp_path / "three.en", ENGLISH[:3])
    (tmp_path / "latin1.de").write_bytes("Ein Mann f\u00e4hrt.\n".encode("latin-1"))
    write_lines(tmp_path / "empty.de", []), write_lines(tmp_path / "empty.en", [])
    fill = dict(src=src, ref=ref, tmp=tmp_path)
    argv = [checkpoint, *(o.format(**fill) for o in options), "--no-progress"]
    assert expected.format(**fill) in refused(main, argv)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_a_device_the_machine_lacks_is_named(own_test_set, refused):
    checkpoint, src, ref = own_test_set
    assert "device 'cuda' is not available on this machine" in refused(
        main, [checkpoint, "--src", src, "--ref", ref, "--device", "cuda"])


def test_the_command_prints_no_traceback(tmp_path):
    """The same as above, through `python -m`: what a user sees."""
    torch.save({"weight": torch.zeros(2)}, tmp_path / "weights.pt")
    result = subprocess.run([sys.executable, "-m", "transformer_course.evaluate", str(tmp_path / "weights.pt")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'weights.pt'} holds model weights only (a state_dict), without the model's settings "
        "and vocabularies: name a checkpoint written by python -m transformer_course.train or save_checkpoint "
        "(OUT/best.pt, OUT/last.pt), which holds all three"]
