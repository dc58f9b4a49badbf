"""Tests in two halves: a *probe* that runs the student's code, and a *judge* that decides.

Every graded test cell of the course is written as

    def probe():                 # calls the answer on chosen inputs; returns plain data
        ...
    def judge(found):            # compares that data with the oracles; raises AssertionError to fail
        ...
    run_test(probe, judge)

In a student's own Jupyter, and in plain ``nbgrader autograde``, ``run_test`` runs both in the kernel. The
course's grader (``python -m autograder grade``) sets ``COURSE_JUDGE_OUTSIDE=1`` in the sandboxed kernel:
there ``run_test`` only runs the probe and sends its data out as a display message; the grader's own process
loads it with a safe loader and runs the cell's judges itself (autograder/execution/judging.py). What the student's
process says about a test cell decides nothing, and it never sees what is expected.

Hidden tests draw their inputs from ``secret_generator(tag)``: a generator seeded from a secret the grader chooses
for each submission it grades (``COURSE_TEST_SEED`` in the kernel's environment; the judge gets the same secret
in the grader's process, never from the kernel). The judge rebuilds the inputs from its own copy of the secret
and recomputes what the answer must return, so neither a recorded payload nor a table of results for inputs
known in advance can pass. Outside the grader (Jupyter, plain nbgrader) the secret is drawn at random once per
process, unless ``COURSE_TEST_SEED`` is set.

Probe data is what ``torch.save`` can store and ``torch.load(weights_only=True)`` can read back without
running code: tensors, numbers, strings, booleans, None, and lists, tuples and str-keyed dicts of them.
An exception the student's code raised travels as a ``Raised`` (its type and message).
"""
import base64
import contextlib
import contextvars
import functools
import hashlib
import io
import os
import re
import secrets
import zipfile

import torch

from .protocol import JUDGE_OUTSIDE, PROBE_MIME, SEED_VARIABLE  # noqa: F401  (the notebooks' cells import them here)

MAX_BYTES = 32 * 2**20                   # one probe's data, serialized: more is refused
MAX_MESSAGE = 200                        # characters kept of an exception's message
MAX_TENSOR_BYTES = 2 * MAX_BYTES         # the values of all of one probe's tensors, loaded
MAX_NODES = 100_000                      # containers, numbers and strings in one probe's data, as restored
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_RAISED_KEY = "__raised__"
_judging_seed = contextvars.ContextVar("judging_seed", default=None)   # the grader's copy, while it judges


@functools.cache
def _process_seed():
    text = os.environ.get(SEED_VARIABLE, "").strip()
    return int(text) if text.isdigit() else secrets.randbits(62)


def secret_seed(tag=""):
    """A seed for the hidden test ``tag``: derived from the grading run's secret (see the module's docstring)."""
    base = _judging_seed.get()
    base = _process_seed() if base is None else base
    return int.from_bytes(hashlib.sha256(f"{base}:{tag}".encode()).digest()[:8], "big") >> 1


def secret_generator(tag=""):
    """A ``torch.Generator`` seeded with ``secret_seed(tag)``: where a hidden test draws its inputs."""
    return torch.Generator().manual_seed(secret_seed(tag))


_flags = contextvars.ContextVar("flags", default=None)   # what the judges flag while the grader judges a cell


def flag_if_same(answer, library, name):
    """For a judge: note, for a person (never a failure), that the answer's result ``answer`` is bit for bit the
    library function ``name``'s result ``library`` on the same secret inputs: a call of it under a name the
    source check cannot follow. An honest computation agrees to rounding, not to the last bit."""
    flags = _flags.get()
    if flags is None or not (isinstance(answer, torch.Tensor) and isinstance(library, torch.Tensor)):
        return
    with torch._C.DisableTorchFunctionSubclass():
        same = answer.dtype == library.dtype and answer.shape == library.shape and bool(torch.equal(answer, library))
    if same and answer.numel() > 1 and f"{name}" not in " ".join(flags):
        flags.append(f"its results on the secret inputs are bit-identical to {name}'s")


@contextlib.contextmanager
def flags_collected():
    """Within the block, flag_if_same collects into the list it yields."""
    flags = []
    token = _flags.set(flags)
    try:
        yield flags
    finally:
        _flags.reset(token)


@contextlib.contextmanager
def judging_with(seed):
    """For the grader: within the block, ``secret_seed`` derives from ``seed`` (the one the kernel was given)."""
    token = _judging_seed.set(int(seed))
    try:
        yield
    finally:
        _judging_seed.reset(token)


class Raised:
    """An exception raised by the student's code, kept as data: its type's name and message.

    Both are of the student's choosing and may reach a feedback page, so they travel in a short, checked form: a
    type name that is an identifier of at most 40 characters (else "Exception"), a message of at most MAX_MESSAGE
    printable characters."""

    def __init__(self, type_name, message):
        type_name = str(type_name)
        self.type_name = type_name if _IDENTIFIER.fullmatch(type_name) else "Exception"
        self.message = "".join(c if c.isprintable() or c == "\n" else "?" for c in str(message)[:MAX_MESSAGE])

    @classmethod
    def of(cls, error):
        return cls(type(error).__name__, str(error)[:MAX_MESSAGE])

    @property
    def first_line(self):
        lines = self.message.strip().splitlines()
        return lines[0][:MAX_MESSAGE] if lines else ""

    def __repr__(self):
        return f"{self.type_name}({self.first_line!r})"


def attempt(function, *args, **kwargs):
    """``function(*args, **kwargs)``, or a ``Raised`` if it raised: one failing call does not stop the probe."""
    try:
        return function(*args, **kwargs)
    except Exception as error:   # the judge decides what an exception means
        return Raised.of(error)


def returned(value, what):
    """For a judge: ``value`` as the answer returned it; an AssertionError naming the exception if it raised."""
    if isinstance(value, Raised):
        raise AssertionError(f"{what} raised {value.type_name}: {value.first_line}")
    return value


def outcome(result, what, hint=None):
    """For a judge: what the answer returned in the probe, or an AssertionError that says how it failed (an
    AssertionError of the answer's own keeps its message)."""
    if isinstance(result, Raised):
        if result.type_name == "AssertionError":
            raise AssertionError(result.message)
        raise AssertionError(f"{what} failed with {result.type_name}: {result.message}" + (f". {hint}" if hint else ""))
    return result


def paired(cases, found):
    """The test's cases (a list, or a dict of lists) zipped with the probe's results for them."""
    if isinstance(cases, dict):
        assert isinstance(found, dict) and set(found) == set(cases), "the probe's data does not match the test's cases"
        return {name: paired(group, found[name]) for name, group in cases.items()}
    assert isinstance(found, list) and len(found) == len(cases), "the probe's data does not match the test's cases"
    return list(zip(cases, found))


def assert_raised_value_error(result, what, why):
    """For a judge: the probed call raised ValueError; ``why`` says which argument is bad."""
    if isinstance(result, Raised) and result.type_name == "ValueError":
        return
    if isinstance(result, Raised):
        raise AssertionError(f"{what} should raise ValueError ({why}), but raised {result.type_name}: {result.first_line}")
    raise AssertionError(f"{what} should raise ValueError ({why}), but returned {type(result).__name__}")


def run_test(probe, judge):
    """Run ``probe`` (the student's code on the test's inputs); then ``judge`` its data, here or in the grader."""
    if os.environ.get(JUDGE_OUTSIDE) == "1":
        from IPython.display import display
        data = pack(attempt(probe))   # an exception is data too: the grader reports it
        display({PROBE_MIME: base64.b64encode(data).decode("ascii")}, raw=True)
        return
    judge(unpack(pack(probe())))   # the judge sees the data exactly as the grader would


# ----------------------------------------------------------------------------- plain data, both ways

def _plain(value, depth=0):
    """``value`` as data torch.load(weights_only=True) reads back; anything else becomes a description."""
    if depth > 20:
        return {"__unsupported__": "data nested more than 20 deep"}
    if isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            return value.detach().cpu().clone().as_subclass(torch.Tensor)
    if isinstance(value, Raised):
        return {_RAISED_KEY: [value.type_name, value.message]}
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (list, tuple):
        return type(value)(_plain(v, depth + 1) for v in value)
    if type(value) is dict and all(type(k) is str for k in value):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, torch.Size):
        return list(value)
    return {"__unsupported__": type(value).__name__}


def pack(found):
    """The probe's data as bytes (torch.save of plain data)."""
    buffer = io.BytesIO()
    torch.save(_plain(found), buffer)
    return buffer.getvalue()


class ProbeDataError(ValueError):
    """Probe data that is too large, compressed or not plain data: it is never loaded."""


def unpack(data, limit=MAX_BYTES):
    """Bytes from ``pack`` back to data, with a loader that runs no code; ``Raised`` records restored. Refused
    (ProbeDataError) before anything reads it whole: data over ``limit``, an archive whose records are compressed,
    overlap or add up to more than ``limit``, tensors that are not dense (a stride-0 view of a few bytes can stand
    for terabytes) or hold more than MAX_TENSOR_BYTES, and more than MAX_NODES values (shared containers would
    be copied once per reference)."""
    if len(data) > limit:
        raise ProbeDataError(f"{len(data)} bytes of probe data, more than the {limit} allowed")
    _check_archive(data, limit)
    try:
        loaded = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as error:   # the safe unpickler refuses anything but plain data
        raise ProbeDataError(f"not plain data ({type(error).__name__}: {str(error)[:200]})") from None
    return _restore(loaded, _Budget())


def _check_archive(data, limit):
    """torch.save writes one uncompressed record after another: anything else is refused unread."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = sorted(archive.infolist(), key=lambda e: e.header_offset)
    except (zipfile.BadZipFile, ValueError) as error:
        raise ProbeDataError(f"not torch.save data ({error})") from None
    if any(e.compress_type != zipfile.ZIP_STORED for e in entries) or sum(e.file_size for e in entries) > limit:
        raise ProbeDataError("compressed or oversized records in the probe data")
    for before, after in zip(entries, entries[1:]):
        if after.header_offset < before.header_offset + len(before.filename) + 30 + before.compress_size:
            raise ProbeDataError("overlapping records in the probe data")


class _Budget:
    """What one probe's data may hold once restored."""

    def __init__(self):
        self.nodes, self.tensor_bytes = 0, 0

    def count(self, value):
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ProbeDataError(f"more than {MAX_NODES} values in the probe data")
        if isinstance(value, torch.Tensor):
            _check_dense(value)
            self.tensor_bytes += value.numel() * value.element_size()
            if self.tensor_bytes > MAX_TENSOR_BYTES:
                raise ProbeDataError(f"tensors of more than {MAX_TENSOR_BYTES} bytes in the probe data")


def _check_dense(tensor):
    """A tensor whose elements each have storage of their own, all of it within its storage."""
    if type(tensor) is not torch.Tensor:
        raise ProbeDataError(f"a tensor of type {type(tensor).__name__} in the probe data")
    if tensor.numel() == 0:   # no element, nothing to share: an empty mask or sequence is an answer like any other
        return
    expected = 1
    for stride, size in sorted((s, n) for s, n in zip(tensor.stride(), tensor.shape) if n != 1):
        if stride != expected:
            raise ProbeDataError("a tensor in the probe data is not dense (its elements share storage)")
        expected *= size
    end = (tensor.storage_offset() + tensor.numel()) * tensor.element_size()
    if tensor.numel() and end > tensor.untyped_storage().nbytes():
        raise ProbeDataError("a tensor in the probe data reaches past its storage")


def _restore(value, budget):
    budget.count(value)
    if type(value) is dict:
        if set(value) == {_RAISED_KEY} and type(value[_RAISED_KEY]) is list and len(value[_RAISED_KEY]) == 2:
            return Raised(*value[_RAISED_KEY])
        return {k: _restore(v, budget) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_restore(v, budget) for v in value)
    if type(value) is str and len(value) > MAX_BYTES // 4:
        raise ProbeDataError("a string of more than a quarter of the data limit in the probe data")
    return value


# ----------------------------------------------------------------------------- calls recorded, then replayed

def call_key(args, kwargs=None):
    """A digest of a call's arguments (tensors by dtype, shape and bytes): the same in the kernel and the grader."""
    import hashlib

    digest = hashlib.sha256()

    def feed(value):
        if isinstance(value, torch.Tensor):
            with torch._C.DisableTorchFunctionSubclass():
                plain = value.detach().cpu().contiguous()
            digest.update(f"T{plain.dtype}{list(plain.shape)}".encode())
            digest.update(plain.view(torch.uint8).numpy().tobytes() if plain.numel() else b"")
        elif type(value) in (list, tuple):
            digest.update(f"{type(value).__name__}{len(value)}(".encode())
            for item in value:
                feed(item)
            digest.update(b")")
        elif type(value) is dict:
            for name in sorted(value):
                digest.update(f"{name}=".encode())
                feed(value[name])
        else:
            digest.update(f"{type(value).__name__}:{value!r};".encode())
    feed([list(args), dict(kwargs or {})])
    return digest.hexdigest()


def record_calls(answer, calls):
    """For a probe: ``answer`` on each (args, kwargs) of ``calls``; its results (or ``Raised``) by call_key."""
    results = {}
    for args, kwargs in calls:
        key = call_key(args, kwargs)
        if key not in results:
            results[key] = attempt(answer, *args, **kwargs)
    return results


class ReplayedError(Exception):
    """An exception the student's code raised, raised again in the judge."""


def _exception_like(raised):
    import builtins

    kind = getattr(builtins, raised.type_name, None)
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = ReplayedError
    return kind(raised.message)


def replayed(results, name):
    """For a judge: a stand-in for the student's ``name`` that returns what the probe recorded for the same
    arguments (or raises what it raised), so that the oracles' checks can call it as they would the answer."""
    def answer(*args, **kwargs):
        key = call_key(args, kwargs)
        if key not in results:
            raise AssertionError(f"the test has no result of {name} for these arguments: the probe did not make "
                                 "this call (a bug in the course's test: please report it)")
        result = results[key]
        if isinstance(result, Raised):
            raise _exception_like(result)
        return result
    return answer
