"""Checks that explain themselves, shared by the notebooks' visible and hidden tests.

A failing check raises ``AssertionError`` with a sentence a student can act on: what was called,
what came back, what was expected and, where a known mistake explains the difference, which one.
"""
import builtins
import contextlib

import torch

# Taken when this module is imported, before any student code runs: a submission that later replaces
# torch.allclose or isinstance (to pass every test) does not change what these checks call.
_allclose = torch.allclose
_isinstance = builtins.isinstance
_no_subclass_tricks = torch._C.DisableTorchFunctionSubclass


def _plain_float64(t):
    """A plain float64 CPU copy: a tensor subclass cannot override the comparisons made on it."""
    with _no_subclass_tricks():
        return t.detach().to(torch.float64).cpu().as_subclass(torch.Tensor)


def _shape(t):
    return list(t.shape)


def check_tensor(actual, what, *, shape=None, dtype=None):
    """``actual`` is a tensor with the given shape and dtype (either may be None: not checked)."""
    assert _isinstance(actual, torch.Tensor), f"{what} should return a torch.Tensor, got {type(actual).__name__}"
    if shape is not None and list(actual.shape) != list(shape):
        hint = ""
        if actual.dim() == len(shape) + 1 and actual.shape[0] == 1 and list(actual.shape[1:]) == list(shape):
            hint = ": there is an extra leading dimension of size 1 (a batch dimension too many?)"
        elif sorted(actual.shape) == sorted(shape):
            hint = ": the same sizes in another order (dimensions transposed?)"
        raise AssertionError(f"{what} has shape {_shape(actual)}, expected {list(shape)}{hint}")
    if dtype is not None and actual.dtype != dtype:
        raise AssertionError(f"{what} has dtype {actual.dtype}, expected {dtype}")


def assert_close(actual, expected, what, *, atol=1e-5, rtol=1e-4, dtype=None, mistakes=None):
    """``actual`` matches the oracle ``expected`` in shape, (optionally) dtype and values.

    ``mistakes`` maps a description of a known mistake to the tensor that mistake would produce
    (or to a function returning it); when the values are wrong and one of them matches, the message
    names it.
    """
    check_tensor(actual, what, shape=expected.shape, dtype=dtype)
    actual_cmp, expected_cmp = _plain_float64(actual), _plain_float64(expected)
    if not torch.isfinite(actual_cmp).all() and torch.isfinite(expected_cmp).all():
        bad = (~torch.isfinite(actual_cmp)).nonzero()[0].tolist()
        raise AssertionError(f"{what} contains NaN or inf (first at index {bad}); every value should be finite")
    if _allclose(actual_cmp, expected_cmp, atol=atol, rtol=rtol):
        return
    for description, produced in (mistakes or {}).items():
        produced = produced() if callable(produced) else produced
        produced = _plain_float64(produced)
        if produced.shape == actual_cmp.shape and _allclose(actual_cmp, produced, atol=atol, rtol=rtol):
            raise AssertionError(f"{what} is wrong: it looks like {description}")
    diff = (actual_cmp - expected_cmp).abs()
    worst = divmod_index(diff.argmax().item(), diff.shape)
    raise AssertionError(
        f"{what} is wrong: at index {worst} it gives {actual_cmp[worst].item():.6g}, expected "
        f"{expected_cmp[worst].item():.6g} (largest difference {diff.max().item():.3g}, "
        f"{(diff > atol + rtol * expected_cmp.abs()).sum().item()} of {diff.numel()} values off)"
    )


def divmod_index(flat_index, shape):
    """The multi-dimensional index of ``flat_index`` in a tensor of ``shape``, as a tuple."""
    index = []
    for size in reversed(shape):
        flat_index, rest = divmod(flat_index, size)
        index.append(rest)
    return tuple(reversed(index))


def assert_raises_value_error(call, what, why):
    """``call()`` raises ``ValueError``; ``why`` says which argument is bad."""
    try:
        result = call()
    except ValueError:
        return
    except Exception as error:  # the wrong kind of error is a failure too
        raise AssertionError(f"{what} should raise ValueError ({why}), but raised {type(error).__name__}: {error}") from None
    raise AssertionError(f"{what} should raise ValueError ({why}), but returned {type(result).__name__}")


@contextlib.contextmanager
def same_random_numbers(seed=0):
    """Run a block with the global RNG seeded, then restore it, so two blocks draw the same numbers."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def substituted(namespace, **replacements):
    """Temporarily replace names in ``namespace`` (a notebook's ``globals()``).

    A test of one exercise swaps in the course's finished versions of the exercises it builds on,
    so that a mistake in one exercise costs points in that exercise only.
    """
    missing = object()
    saved = {name: namespace.get(name, missing) for name in replacements}
    namespace.update(replacements)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value


def laid_out_as(actual, shape, what):
    """The values of ``actual`` laid out as ``shape`` (broadcast when its shape broadcasts to ``shape``,
    else reshaped when it holds as many values), so that a values test can grade an answer whose shape
    is wrong: a separate shape test costs that mistake. AssertionError when neither works."""
    check_tensor(actual, what)
    try:
        return torch.broadcast_to(actual, list(shape))
    except RuntimeError:
        pass
    if actual.numel() == torch.Size(shape).numel():
        return actual.reshape(list(shape))
    raise AssertionError(f"{what} has shape {_shape(actual)}, which cannot hold the values of a tensor of shape "
                         f"{list(shape)}: fix the shape first (see the shape test)")


@contextlib.contextmanager
def forbidden(namespace, owner, name, message, when=None):
    """Within the block, a call of ``owner.<name>`` (e.g. ``torch.nn.functional``, ``"cross_entropy"``) raises
    ``AssertionError(message)`` when ``when(*args, **kwargs)`` is true (always without ``when``); other calls go
    through. Names in ``namespace`` (a notebook's ``globals()``) bound to the same function are guarded too.
    For exercises that must be written without a library shortcut."""
    original = getattr(owner, name)

    def guarded(*args, **kwargs):
        if when is None or when(*args, **kwargs):
            raise AssertionError(message)
        return original(*args, **kwargs)

    aliases = [key for key, value in namespace.items() if value is original]
    setattr(owner, name, guarded)
    namespace.update({key: guarded for key in aliases})
    try:
        yield original
    finally:
        setattr(owner, name, original)
        namespace.update({key: original for key in aliases})
