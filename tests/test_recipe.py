"""The recipe's pieces: subwords, tied embeddings, fast CPU dropout, checkpoint averaging, the one command."""
import json
import os

import pytest
import torch
from support.builders import add_held_out_stand_in, mirror_of_six
from torch import nn

from transformer_course import Transformer
from transformer_course.cpu import FastDropout, use_fast_dropout
from transformer_course.data import Vocab, load_split
from transformer_course.run.batches import load_multi30k
from transformer_course.run.checkpoints import average_checkpoints, load_checkpoint, save_checkpoint
from transformer_course.run.configs import CONFIGS, RECIPE_FILE, load_config
from transformer_course.subword import SubwordTokenizer

MIRROR = os.environ.get("MULTI30K_MIRROR")
needs_mirror = pytest.mark.skipif(not MIRROR, reason="needs the Multi30k mirror (../shared/data/multi30k)")

SENTENCES = ["Ein Mann fährt Fahrrad.", "A man rides a bike.", "Zwei Hunde spielen im Schnee.",
             "Two dogs play in the snow.", "Eine Frau liest ein Buch am Strand.", "A woman reads a book on the beach."] * 20


def test_subword_pieces_decode_back_to_the_text(tmp_path):
    tokenizer = SubwordTokenizer.train(SENTENCES, vocab_size=120, cache_dir=tmp_path)
    pieces = tokenizer.to_pieces(["Zwei Männer lesen im Schnee."])[0]
    assert tokenizer.to_text(pieces) == "Zwei Männer lesen im Schnee.", pieces
    assert "<unk>" not in tokenizer.pieces and len(tokenizer.pieces) == len(tokenizer) - 1
    again = SubwordTokenizer.train(SENTENCES, vocab_size=120, cache_dir=tmp_path)        # from the cache
    assert again.model_proto == tokenizer.model_proto and len(list(tmp_path.glob("*.model"))) == 1
    assert SubwordTokenizer(tokenizer.model_proto).to_pieces(["Ein Hund"]) == tokenizer.to_pieces(["Ein Hund"])


def test_tied_embeddings_share_one_matrix():
    model = Transformer(50, 50, d_model=16, n_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                        tie_embeddings=True)
    shared = model.src_embed.embedding.weight
    assert model.tgt_embed.embedding.weight is shared and model.generator.weight is shared
    untied = Transformer(50, 50, d_model=16, n_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32)
    count = lambda m: sum(p.numel() for p in m.parameters())   # noqa: E731
    assert count(untied) - count(model) == 2 * 50 * 16
    with pytest.raises(ValueError, match="one vocabulary"):
        Transformer(50, 60, d_model=16, tie_embeddings=True)


def test_tied_token_vectors_start_as_large_as_the_positional_encoding():
    torch.manual_seed(0)
    model = Transformer(2000, 2000, d_model=64, n_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                        tie_embeddings=True)
    tokens = model.src_embed(torch.arange(1, 2000))                    # scaled by sqrt(d_model)
    mean_square = tokens.pow(2).mean().item()
    assert 0.9 < mean_square < 1.1, f"scaled token vectors have mean square {mean_square:.3f}, not about 1"
    assert abs(model.pos_encoding.pe[:50].pow(2).mean().item() - 0.5) < 0.05  # the encoding's, for comparison


def test_fast_dropout_drops_the_right_share_and_keeps_the_mean():
    torch.manual_seed(0)
    dropout = FastDropout(0.3)
    x = torch.ones(1000, 1000, requires_grad=True)
    y = dropout(x)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - 77 / 256) < 0.002, "the share of zeros should be 77/256 for p=0.3"
    assert abs(y.mean().item() - 1.0) < 0.005, "kept values must be scaled so that the mean is unchanged"
    y.sum().backward()
    assert torch.equal(x.grad, y.detach()), "the gradient flows through the kept elements, scaled the same way"
    dropout.eval()
    assert torch.equal(dropout(x), x), "in eval mode dropout is the identity"


def test_use_fast_dropout_replaces_every_dropout_with_the_same_probability():
    model = Transformer(20, 20, d_model=16, n_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, dropout=0.2)
    before = sum(isinstance(m, nn.Dropout) for m in model.modules())
    use_fast_dropout(model)
    assert sum(isinstance(m, FastDropout) for m in model.modules()) == before
    assert all(m.p == 0.2 for m in model.modules() if isinstance(m, nn.Dropout))


def tiny_checkpoint(path, seed):
    torch.manual_seed(seed)
    config = {"model": {"src_vocab_size": 10, "tgt_vocab_size": 10, "d_model": 8, "n_heads": 2,
                        "num_encoder_layers": 1, "num_decoder_layers": 1, "d_ff": 16, "tie_embeddings": True}}
    model = Transformer(**config["model"])
    vocab = Vocab([f"t{i}" for i in range(10)])
    save_checkpoint(path, model, vocab, vocab, config, subword=b"model bytes stand-in", epoch=seed)
    return model


def test_average_checkpoints_is_the_mean_of_the_weights(tmp_path, monkeypatch):
    models = [tiny_checkpoint(tmp_path / f"epoch{i}.pt", i) for i in (1, 2, 3)]
    monkeypatch.setattr("transformer_course.run.checkpoints.SubwordTokenizer", lambda proto: proto)  # not a real model
    average_checkpoints([tmp_path / f"epoch{i}.pt" for i in (1, 2, 3)], tmp_path / "averaged.pt")
    averaged = load_checkpoint(tmp_path / "averaged.pt")
    for name, value in averaged["model"].state_dict().items():
        expected = sum(m.state_dict()[name] for m in models) / 3
        torch.testing.assert_close(value, expected, msg=f"{name} is not the mean of the three checkpoints")
    assert averaged["subword"] == b"model bytes stand-in" and averaged["averaged"] == ["epoch1.pt", "epoch2.pt", "epoch3.pt"]
    assert averaged["model"].generator.weight is averaged["model"].src_embed.embedding.weight, "tying lost on loading"


def test_configuration_files_are_checked(tmp_path):
    recipe = load_config(RECIPE_FILE)
    assert recipe == CONFIGS["recipe"]
    assert recipe["model"]["tie_embeddings"] and recipe["data"]["tokenizer"] == "subword"
    assert recipe["train"]["average_last"] > 1 and recipe["data"]["max_train_pairs"] is None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": {"d_modle": 256}}))
    with pytest.raises(ValueError, match="d_modle"):
        load_config(bad)
    bad.write_text(json.dumps({"optimizer": {}}))
    with pytest.raises(ValueError, match="optimizer"):
        load_config(bad)


def test_a_configuration_file_can_be_loaded_with_settings_changed():
    changed = load_config(RECIPE_FILE, model=dict(d_model=128), train=dict(epochs=2))
    assert changed["model"]["d_model"] == 128 and changed["train"]["epochs"] == 2
    assert changed["model"]["n_heads"] == CONFIGS["recipe"]["model"]["n_heads"], "the other settings are the file's"
    assert CONFIGS["recipe"]["model"]["d_model"] == 256, "changing a loaded configuration changed the recipe"
    with pytest.raises(ValueError, match="d_modle"):
        load_config(RECIPE_FILE, model=dict(d_modle=128))
    with pytest.raises(ValueError, match="optimizer"):
        load_config(RECIPE_FILE, optimizer=dict(lr=1))


@needs_mirror
def test_subword_data_shares_one_vocabulary(tmp_path):
    data = load_multi30k(max_train_pairs=500, max_val_pairs=20, tokenizer="subword", vocab_size=400,
                         lowercase=False, mirror=MIRROR, cache_dir=tmp_path)
    assert data.src_vocab is data.tgt_vocab and len(data.src_vocab) == 400 + 3   # + <pad> <bos> <eos>
    assert data.src_vocab.itos[:4] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    pieces = data.src_vocab.decode(data.train[0][1][1:-1])
    assert data.subword.to_text(pieces) == " ".join(data.train.tgt_tokens[0]).replace(" ", "").replace("▁", " ").strip()


@needs_mirror
def test_reproduce_trains_averages_chooses_on_val_and_writes_results(tmp_path, monkeypatch):
    from transformer_course.reproduce import held_out, main, parser

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({
        "model": {"d_model": 32, "n_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1, "d_ff": 64,
                  "tie_embeddings": True},
        "data": {"max_train_pairs": 300, "max_val_pairs": 20, "min_freq": 1, "lowercase": False,
                 "tokenizer": "subword", "vocab_size": 300},
        "train": {"epochs": 3, "max_tokens": 600, "warmup_steps": 20, "average_last": 2, "schedule": "linear"},
        "evaluate": {"beam_size": 2, "alpha": [0.6, 1.0]}}))
    out = tmp_path / "run"
    mirror = mirror_of_six(tmp_path / "mirror", MIRROR)
    val_de, val_en = load_split("val", mirror=MIRROR)
    add_held_out_stand_in(mirror, list(zip(val_de, val_en))[:12], monkeypatch)
    assert main(["--config", str(config), "--out", str(out), "--mirror", str(mirror), "--cache-dir", str(tmp_path),
                 "--limit", "10", "--no-progress", "--no-amp"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["precision"] == "torch.float32" and results["compile"] is None
    assert results["checkpoint"] in ("averaged.pt", "best.pt") and results["alpha"] in (0.6, 1.0)
    assert set(results["validation"]) == {f"{name} alpha={alpha}" for name in ("averaged.pt", "best.pt")
                                          for alpha in (0.6, 1.0)}, "every candidate is scored on val"
    best = max(results["validation"].values(), key=lambda scores: scores["sacrebleu"])
    assert results["validation"][f"{results['checkpoint']} alpha={results['alpha']}"] == best
    assert results["test"]["sentences"] == 10 and results["test"]["signature"].startswith("nrefs:1|case:mixed")
    assert 0 <= results["test"]["sacrebleu"] <= 100 and results["training_minutes"] >= 0
    assert "python -m transformer_course.reproduce" in (out / "results.md").read_text()
    assert load_checkpoint(out / "averaged.pt")["averaged"] == ["epoch2.pt", "epoch3.pt"]
    assert len((out / "test_translations.txt").read_text().splitlines()) == 10
    held = results["test_2017"]
    assert held["split"] == "test_2017_flickr" and held["sentences"] == 10 and 0 <= held["sacrebleu"] <= 100
    assert "Held out, test_2017_flickr (10 sentences)" in (out / "results.md").read_text()
    # A mirror without the held-out files (as this project's) costs that score only, and says why.
    args = parser().parse_args(["--out", str(out), "--no-progress", "--limit", "10"])
    six = {"mirror": mirror_of_six(tmp_path / "six", MIRROR)}
    missing = held_out(out / "best.pt", load_config(config), 1.0, torch.device("cpu"), six, args)
    assert "test_2017_flickr.de.gz is missing" in missing["not_scored"], missing


@pytest.mark.parametrize("options, expected", [
    (["--mirror", "{tmp}/no-mirror"], "the Multi30k mirror {tmp}/no-mirror is not a folder"),
    (["--config", "{tmp}/none.json"], "--config {tmp}/none.json: No such file or directory"),
    (["--config", "{tmp}/broken.json"], "{tmp}/broken.json is not a JSON configuration"),
    (["--device", "warp"], "unknown device 'warp'"),
    (["--compile", "warp"], "--compile warp: not a torch.compile backend"),
])
def test_reproduce_names_bad_input_in_one_line(tmp_path, refused, options, expected):
    from transformer_course.reproduce import main

    (tmp_path / "broken.json").write_text("{model: 1")
    argv = ["--out", str(tmp_path / "run"), "--no-progress", *(o.format(tmp=tmp_path) for o in options)]
    assert expected.format(tmp=tmp_path) in refused(main, argv)
