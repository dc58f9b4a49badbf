"""Checkpoints: a model's weights together with everything needed to use it again (its settings, both
vocabularies, the subword model), written atomically and read back with errors that say what is wrong."""
import os
import pickle
import tempfile
from pathlib import Path

import torch

from ..data import Vocab
from ..model import build_model
from ..subword import SubwordTokenizer

__all__ = ["save_checkpoint", "read_checkpoint", "load_checkpoint", "CheckpointError", "average_checkpoints",
           "plain_values"]


def save_checkpoint(path, model, src_vocab, tgt_vocab, config, **extra):
    """Save the model's weights, both vocabularies, the config (its "model" entry: the Transformer's keyword
    arguments) and any extra entries. Written to a temporary file and renamed, so `path` is never half-written."""
    if "model" not in config:
        raise ValueError("config needs a 'model' entry with the Transformer's keyword arguments")
    reserved = {"model", "src_vocab", "tgt_vocab", "config", "format"} & set(extra)
    if reserved:
        raise ValueError(f"extra entries may not be called {sorted(reserved)}")
    state = {"format": 1, "model": model.state_dict(), "src_vocab": list(src_vocab.itos),
             "tgt_vocab": list(tgt_vocab.itos), "config": plain_values(config), **extra}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


class CheckpointError(ValueError):
    """The file is not a checkpoint of this course: missing, a folder, not written by torch.save, or weights
    without the model's settings and vocabularies. The message names the file and says what was expected."""


CHECKPOINT_ENTRIES = ("model", "src_vocab", "tgt_vocab", "config")
_WRITTEN_BY = "a checkpoint written by python -m transformer_course.train or save_checkpoint (OUT/best.pt, OUT/last.pt)"


def read_checkpoint(path, map_location="cpu"):
    """The dict that the checkpoint file `path` holds (torch.load, weights only), checked to be one that
    `save_checkpoint` wrote: CheckpointError otherwise."""
    path = Path(path)
    if path.is_dir():
        inside = ", ".join(sorted(p.name for p in path.glob("*.pt")))
        raise CheckpointError(f"{path} is a folder, not a checkpoint file: name "
                              + (f"one of the checkpoints in it ({inside})" if inside else _WRITTEN_BY))
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path} does not exist: name {_WRITTEN_BY}") from None
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read ({error.strerror or error})") from None
    except Exception as error:   # torch.load fails in many ways (KeyError, EOFError, ...) on what it did not write
        raise CheckpointError(f"{path} is not a checkpoint: {_unreadable(path, error)}; name {_WRITTEN_BY}") from None
    if isinstance(state, dict) and state and all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} holds model weights only (a state_dict), without the model's settings and "
                              f"vocabularies: name {_WRITTEN_BY}, which holds all three")
    missing = [key for key in CHECKPOINT_ENTRIES if not isinstance(state, dict) or key not in state]
    if missing:
        raise CheckpointError(f"{path} is not a checkpoint of this course: it lacks {missing}; name {_WRITTEN_BY}")
    return state


def _unreadable(path, error):
    """Why torch.load could not read `path`, in words."""
    head = path.read_bytes()[:4096]
    if isinstance(error, pickle.UnpicklingError) and head.startswith(b"PK"):
        return "it holds Python objects besides weights and plain values (a model saved whole with torch.save(model)?)"
    if not head:
        return "it is empty"
    if b"\0" in head:
        return "torch.load cannot read it (not a file written by torch.save, or a damaged one)"
    best = path.parent / "best.pt"
    return "it is a text file" + (f" (the run's checkpoint is {best})" if best.exists() and best != path else "")


def load_checkpoint(path, map_location="cpu"):
    """A checkpoint written by `save_checkpoint`, as a dict: "model" (a Transformer rebuilt from the config,
    weights loaded, in eval mode), "src_vocab" and "tgt_vocab" (Vocab), "config" (a plain dict) and the
    extra entries it was saved with ("subword", when there is one, as a SubwordTokenizer). A file that is
    not such a checkpoint raises CheckpointError, which says so."""
    state = read_checkpoint(path, map_location)
    state.pop("format", None)
    try:
        model = build_model(**state["config"]["model"])
        model.load_state_dict(state["model"])
    except (TypeError, KeyError, RuntimeError) as error:
        raise CheckpointError(f"{path}: the weights do not fit the model that its config describes "
                              f"({str(error).strip().splitlines()[0]})") from None
    if isinstance(map_location, (str, torch.device)):
        model.to(map_location)
    state.update(model=model.eval(), src_vocab=Vocab(state["src_vocab"]), tgt_vocab=Vocab(state["tgt_vocab"]))
    if state.get("subword") is not None:
        state["subword"] = SubwordTokenizer(state["subword"])
    return state


def average_checkpoints(paths, out_path):
    """Save to `out_path` the element-wise mean of the weights of the checkpoints in `paths` (the same model,
    e.g. the last epochs of one run), with the vocabularies, config and subword model of the last one.
    The average lies in the middle of the region the last updates wandered through, and usually
    translates better than any single one of them."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    states = [read_checkpoint(p) for p in paths]
    weights = [state["model"] for state in states]
    if any(w.keys() != weights[0].keys() for w in weights):
        raise ValueError(f"the checkpoints {[str(p) for p in paths]} do not hold the same model")
    mean = {key: (sum(w[key].double() for w in weights) / len(weights)).to(weights[0][key].dtype)
            if weights[0][key].is_floating_point() else weights[0][key] for key in weights[0]}
    last = states[-1]
    extra = {k: v for k, v in last.items() if k not in ("format", "model", "src_vocab", "tgt_vocab", "config")}
    model = build_model(**last["config"]["model"])
    model.load_state_dict(mean)
    return save_checkpoint(out_path, model, Vocab(last["src_vocab"]), Vocab(last["tgt_vocab"]), last["config"],
                           **{**extra, "averaged": [str(p.name) for p in paths]})


def plain_values(value):
    """A JSON-like copy (dicts, lists, numbers, strings, None), as the checkpoint and the log store it."""
    if isinstance(value, dict):
        return {str(k): plain_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_values(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    raise TypeError(f"a config holds plain values only, got {type(value).__name__}: {value!r}")
