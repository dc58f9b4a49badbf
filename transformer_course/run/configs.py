"""The training configurations: "quick" and "full" below, and "recipe", the course's best model, read from
transformer_course/recipes/multi30k_de_en.json when this module is imported. A configuration is a dict of
sections: "model" (the Transformer's keyword arguments), "data" (load_multi30k's), "train" (the run's) and,
for the recipe, "evaluate" (beam size and length penalty α)."""
import copy
import dataclasses
import json
from pathlib import Path

from ..decoding import PAPER

__all__ = ["CONFIGS", "SECTIONS", "RECIPE_FILE", "load_config", "make_config"]

# "quick": a small model on a subset, a few minutes on a laptop CPU (notebook 07 and CI use it).
# "full": all of Multi30k with the paper's base model sizes but 3 layers a side (6 overfit these 29k pairs),
# for a GPU (measured: 20 epochs in 3.3 minutes on an NVIDIA H200 in bfloat16; the best epoch was the 12th).
CONFIGS = {
    "quick": {
        "model": {"d_model": 128, "n_heads": 4, "num_encoder_layers": 2, "num_decoder_layers": 2, "d_ff": 256,
                  "dropout": 0.1, "max_len": 256, "norm_first": False, "tie_embeddings": False},
        "data": {"max_train_pairs": 5000, "max_val_pairs": 500, "min_freq": 2, "lowercase": True,
                 "tokenizer": "spacy", "vocab_size": None},
        "train": {"epochs": 6, "max_tokens": 1500, "warmup_steps": 200, "lr_factor": 1.0, "schedule": "noam",
                  "smoothing": 0.1, "clip": 1.0,
                  "betas": [0.9, 0.98], "eps": 1e-9, "seed": 0, "max_steps": None, "average_last": 0},
    },
    "full": {
        "model": {"d_model": 512, "n_heads": 8, "num_encoder_layers": 3, "num_decoder_layers": 3, "d_ff": 2048,
                  "dropout": 0.1, "max_len": 256, "norm_first": False, "tie_embeddings": False},
        "data": {"max_train_pairs": None, "max_val_pairs": None, "min_freq": 2, "lowercase": True,
                 "tokenizer": "spacy", "vocab_size": None},
        "train": {"epochs": 20, "max_tokens": 4096, "warmup_steps": 2000, "lr_factor": 1.0, "schedule": "noam",
                  "smoothing": 0.1, "clip": 1.0,
                  "betas": [0.9, 0.98], "eps": 1e-9, "seed": 0, "max_steps": None, "average_last": 0},
    },
}
SECTIONS = ("model", "data", "train", "evaluate")

# "recipe": the course's best model (transformer_course/recipes/multi30k_de_en.json), behind
# `python -m transformer_course.reproduce`: subwords, tied embeddings, averaged weights, beam search.
RECIPE_FILE = Path(__file__).parent.parent / "recipes" / "multi30k_de_en.json"


def load_config(path, **changes):
    """A configuration file (JSON with "model", "data" and "train" sections, optionally "evaluate") as a dict;
    the sections missing from it, and the keys missing from them, come from CONFIGS["full"]. `changes`: settings
    that replace the file's, a dict per section (``model=dict(d_model=128)``), checked as the file's are."""
    try:
        stored = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not a JSON configuration ({error})") from None
    for section, settings in changes.items():
        stored[section] = {**stored.get(section, {}), **settings}
    unknown = sorted(set(stored) - set(SECTIONS) - {"about", "mode"})
    if unknown:
        raise ValueError(f"{path}: unknown sections {unknown}; a configuration has {list(SECTIONS)}")
    config = copy.deepcopy(CONFIGS["full"])
    config["evaluate"] = dataclasses.asdict(PAPER)      # the paper's decoding unless the file says otherwise
    for section in SECTIONS:
        optional = {"architecture"} if section == "model" else set()   # model.build_model's; a Transformer by default
        extra = sorted(set(stored.get(section, {})) - set(config[section]) - optional)
        if extra:
            raise ValueError(f"{path}: unknown settings {section}.{extra}; known: {sorted(config[section])}")
        config[section].update(stored.get(section, {}))
    return config


CONFIGS["recipe"] = load_config(RECIPE_FILE)


def make_config(mode="quick", **overrides):
    """A copy of CONFIGS[mode] with overrides given as section__key=value, e.g. model__d_model=256,
    train__epochs=3, data__max_train_pairs=None."""
    if mode not in CONFIGS:
        raise ValueError(f"mode must be one of {sorted(CONFIGS)}, got {mode!r}")
    config = copy.deepcopy(CONFIGS[mode])
    config["mode"] = mode
    for name, value in overrides.items():
        section, _, key = name.partition("__")
        if section not in SECTIONS or key not in config.get(section, {}):
            raise ValueError(f"unknown setting {name!r}: use section__key with a key of {CONFIGS[mode]}")
        config[section][key] = value
    return config
