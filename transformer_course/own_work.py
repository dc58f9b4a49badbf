"""The course's finished answers refuse to run in their own exercise's tests.

The package ships the finished version of every exercise, because later notebooks build on them. So
that it cannot be handed in as an answer, every test cell of exercise X starts with

    require_own_work("X", globals())

For the rest of that cell the finished X raises ``FinishedAnswerUsed`` when it is called, and so do the
package's helpers that do its work when an answer calls them, whatever route reached them: an import, an alias, a lookup by
name, a subclass, a wrapper, an instance held inside the answer. The finished versions of the *other*
exercises keep working, as the notebooks ask. An answer that is the finished X itself (the same object, a
subclass of it, or a verbatim copy of its code) fails at once.

How: on the first ``require_own_work`` (or ``install_gates``), every finished function, and every method of
every finished class, gets new code (``__code__``) that asks a gate before it runs the original code. Not at
import: ordinary use of the package (``torch.compile`` of its model, say) must find the code as written. Aliases, subclasses,
bound methods and instances made earlier all hold these same function objects, so every route passes the
gate. The refusal ends with the cell: the gate refuses only while the test cell's code is on the call
stack or the kernel still runs that cell (a thread the answer starts).
"""
import dis
import inspect
import sys
import types
import warnings

from . import attention, bleu, data, decoding, embeddings, gpt, layers, masks, model, schedules, training


class FinishedAnswerUsed(BaseException):
    """Raised when a test of exercise X reaches the course's finished X.

    A BaseException, not an Exception: a test's own ``except Exception`` (which turns an error into a hint)
    must not hide it, and neither should an answer's."""


# exercise -> (the finished answer, then the package's helpers that do its work)
FINISHED = {
    "positional_encoding": (embeddings.positional_encoding,),
    "TokenEmbedding": (embeddings.TokenEmbedding,),
    "PositionalEncoding": (embeddings.PositionalEncoding,),
    "scaled_dot_product_attention": (attention.scaled_dot_product_attention, attention._fused_attention),
    "padding_mask": (masks.padding_mask,),
    "causal_mask": (masks.causal_mask,),
    "target_mask": (masks.target_mask,),
    "split_heads": (attention.split_heads,),
    "merge_heads": (attention.merge_heads,),
    "MultiHeadAttention": (attention.MultiHeadAttention, attention._fused_attention, attention._stacked_linear),
    "LayerNorm": (layers.LayerNorm,),
    "PositionwiseFeedForward": (layers.PositionwiseFeedForward,),
    "EncoderLayer": (layers.EncoderLayer, layers.residual),
    "DecoderLayer": (layers.DecoderLayer, layers.residual),
    "Encoder": (layers.Encoder,),
    "Decoder": (layers.Decoder,),
    "Transformer": (model.Transformer,),
    "build_vocab": (data.build_vocab,),
    "label_smoothing_loss": (training.label_smoothing_loss,),
    "noam_lr": (training.noam_lr,),
    "train_step": (training.train_step, training.amp_train_step),
    "greedy_decode": (decoding.greedy_decode, decoding._next_log_probs),
    "beam_search": (decoding.beam_search, decoding.beam_search_batch, decoding._Beam, decoding.beam_search_tree),
    "corpus_bleu": (bleu.corpus_bleu, bleu.bleu_statistics),
    "apply_rope": (embeddings.apply_rope,),
    "CausalSelfAttention": (gpt.CausalSelfAttention,),
    "GPT": (gpt.GPT, gpt.GPTBlock),
    "lm_loss": (gpt.lm_loss,),
    "adamw_param_groups": (gpt.adamw_param_groups,),
    "warmup_cosine_lr": (schedules.warmup_cosine_lr,),
    "sample_next": (gpt.sample_next, decoding.sampling_distribution, decoding.top_k_filter, decoding.top_p_filter),
    "generate": (gpt.generate,),
}


def _refusal_message(exercise, piece):
    name = f"{piece.__module__}.{piece.__qualname__}"
    if piece.__module__.startswith(f"{__package__}.oracles."):
        return (f"this answer calls `{name}`, the tests' own computation of `{exercise}`: it is there to grade "
                f"your answer; here, write your own")
    if piece is FINISHED[exercise][0]:
        return (f"this answer uses the course's finished `{exercise}` ({name}): the package's version is "
                f"there for the later notebooks; here, write your own")
    return (f"this answer calls `{name}`, part of the course's finished `{exercise}`: the package's version is "
            f"there for the later notebooks; here, write your own")


# ----------------------------------------------------------------------------- the refusal in force

class _Refusal:
    """Which exercise is under test, and the test cell that said so: its frame, and in a kernel its count and
    its file (IPython runs each statement of a cell in a frame of its own, all with the cell's file name)."""

    def __init__(self, exercise, frame, cell_count):
        self.exercise, self.frame, self.cell_count = exercise, frame, cell_count
        self.cell_file = frame.f_code.co_filename if cell_count is not None else None

    def in_force(self):
        if self.cell_count is not None and _cell_count() == self.cell_count:
            return True
        frame = sys._getframe(1)
        while frame is not None:
            if frame is self.frame or frame.f_code.co_filename == self.cell_file:
                return True
            frame = frame.f_back
        return False


def _cell_count():
    """The kernel's count of the cell now running (None outside IPython)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "execution_count", None)


def _make_refusal_state():
    # Held in closures, not in module attributes, so that no name leads an answer to it. A new refusal
    # never ends another: an answer that calls require_own_work for some other exercise ends nothing.
    active = []

    def add_refusal(refusal):
        active[:] = [r for r in active if r.in_force()] + [refusal]

    def refused(exercises):
        """The exercise under test if it is one of ``exercises`` and its test cell still runs, else None."""
        for refusal in active:
            if refusal.exercise in exercises and refusal.in_force():
                return refusal.exercise
        return None

    return add_refusal, refused


_add_refusal, _refused = _make_refusal_state()


# ----------------------------------------------------------------------------- the gates

_ORIGINAL_CODE = {}   # gated function -> its original code, to recognise a verbatim copy


def _gate_code(original, gate):
    """Code that hands (args, kwargs) to ``gate``. It keeps the free variables of the ``original`` code (a
    function's code may only be replaced by code with as many: a method that calls super() has __class__),
    and its name, file and first line, so that inspect.getsource and tracebacks still find the source."""
    freevars = original.co_freevars
    source = (f"def outer():\n    {'; '.join(f'{name} = None' for name in freevars) or 'pass'}\n"
              f"    def gated(*args, **kwargs):\n        {', '.join(freevars) or 'pass'}\n"
              f"        return 'GATE'(args, kwargs)\n    return gated\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)   # "'str' object is not callable": replaced below
        namespace = {}
        exec(compile(source, f"<gate of {__name__}>", "exec"), namespace)
    code = namespace["outer"]().__code__
    # The gate travels as a constant of the code: nothing reachable by name holds it.
    return code.replace(co_consts=tuple(gate if const == "GATE" else const for const in code.co_consts),
                        co_filename=original.co_filename, co_firstlineno=original.co_firstlineno,
                        co_name=original.co_name, co_qualname=original.co_qualname)


def _called_by_the_package(frame, function):
    """The package's own code calls ``function`` by its name: the caller runs in a module of the package (with
    that module's own globals, not a dict named like them) and names it. An answer that is the helper itself
    (an oracle, say), handed to a check that calls the answer it is given, is not called by name."""
    module = sys.modules.get(frame.f_globals.get("__name__", ""))
    code = frame.f_code
    return (module is not None and module.__name__.partition(".")[0] == __name__.partition(".")[0]
            and vars(module) is frame.f_globals and function.__name__ in code.co_names + code.co_freevars)


def _install_gate(function, exercises, piece, helper, refused=_refused):
    original = types.FunctionType(function.__code__, function.__globals__, function.__name__,
                                  function.__defaults__, function.__closure__)
    original.__kwdefaults__, original.__qualname__ = function.__kwdefaults__, function.__qualname__

    def gate(args, kwargs):
        exercise = refused(exercises)   # bound now: replacing the module's _refused later changes nothing
        # A helper refuses an answer that calls it, not the package's finished code of other exercises.
        if exercise is not None and not (helper and _called_by_the_package(sys._getframe(2), function)):
            raise FinishedAnswerUsed(_refusal_message(exercise, piece))
        return original(*args, **kwargs)

    function.__signature__ = inspect.signature(function)   # help() and inspect still show the real one
    _ORIGINAL_CODE[function] = function.__code__
    function.__code__ = _gate_code(function.__code__, gate)


def _functions_of(piece):
    """A function, or every function defined in a class's body (methods, static and class methods)."""
    if isinstance(piece, types.FunctionType):
        return [piece]
    found = []
    for value in vars(piece).values():
        value = getattr(value, "__func__", value)
        if isinstance(value, types.FunctionType):
            found.append(value)
    return found


def add_answer_helpers(answer_helpers):
    """The hidden tests' oracles that compute an exercise's answer (exercise -> functions) are helpers of that
    exercise too: the oracles call this when they are imported (a package without them lacks nothing)."""
    for exercise, helpers in answer_helpers.items():
        FINISHED[exercise] += tuple(h for h in helpers if h not in FINISHED[exercise])
    if _ORIGINAL_CODE:   # the gates are up already: these get theirs now
        install_gates()


def install_gates():
    """Gate every finished function not gated yet. require_own_work calls it; the grader's kernel guard calls
    it before it captures the package's code, so that the gates are part of what it protects."""
    owners = {}   # function -> [the exercises it belongs to, the piece it comes from, whether only a helper]
    for exercise, pieces in FINISHED.items():
        for piece in pieces:
            for function in _functions_of(piece):
                owner = owners.setdefault(function, [set(), piece, True])
                owner[0].add(exercise)
                owner[2] = owner[2] and piece is not pieces[0]
    for function, (exercises, piece, helper) in owners.items():
        if function not in _ORIGINAL_CODE:
            _install_gate(function, frozenset(exercises), piece, helper)


# ----------------------------------------------------------------------------- the test cells' call

# Instructions that say nothing of what code does, or that the compiler picks by context (a call on an
# imported module's attribute is LOAD_ATTR in the module's own file, LOAD_METHOD where it was not imported).
_UNSPOKEN = {"CACHE", "NOP", "RESUME", "PRECALL", "PUSH_NULL", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL"}
_SAME_AS = {"LOAD_METHOD": "LOAD_ATTR", "CALL_METHOD": "CALL"}
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)


def _code_shape(code):
    """What a verbatim copy of ``code`` shares with it wherever it is compiled: its instructions with their
    names and constants (jump offsets, file and line numbers left out)."""
    shape = [code.co_varnames, code.co_argcount, code.co_kwonlyargcount]
    for instruction in dis.get_instructions(code):
        if instruction.opname in _UNSPOKEN:
            continue
        argument = instruction.argval
        if isinstance(argument, types.CodeType):
            argument = _code_shape(argument)
        elif instruction.opcode in _JUMPS:
            argument = None
        else:
            argument = repr(argument)
        shape.append((_SAME_AS.get(instruction.opname, instruction.opname), argument))
    return shape


def _verbatim_copy(answer, finished):
    """``answer`` repeats the finished code, docstring and all (exec of the package's source, say)."""
    if not finished.__doc__ or getattr(answer, "__doc__", None) != finished.__doc__:
        return False
    pairs = [(answer, finished)] if isinstance(finished, types.FunctionType) else [
        (vars(answer).get(name), method) for name, method in vars(finished).items()
        if isinstance(method, types.FunctionType)]
    return all(isinstance(mine, types.FunctionType) and _code_shape(mine.__code__) ==
               _code_shape(_ORIGINAL_CODE.get(theirs, theirs.__code__)) for mine, theirs in pairs)


def is_finished_answer(answer, exercise):
    """Whether ``answer`` is the course's finished ``exercise``: the same object, a subclass, a verbatim copy."""
    finished = FINISHED[exercise][0]
    if answer is finished:
        return True
    if isinstance(answer, type) and isinstance(finished, type) and issubclass(answer, finished):
        return True
    return isinstance(answer, type(finished)) and _verbatim_copy(answer, finished)


def require_own_work(exercise, namespace):
    """Called first in every test cell of ``exercise``: the finished ``exercise`` fails the rest of the cell.

    ``namespace`` is the notebook's ``globals()``, where the answer is defined."""
    if exercise not in FINISHED:
        raise ValueError(f"unknown exercise {exercise!r}; expected one of {', '.join(FINISHED)}")
    install_gates()
    answer = namespace.get(exercise)
    if answer is not None and is_finished_answer(answer, exercise):
        raise FinishedAnswerUsed(_refusal_message(exercise, FINISHED[exercise][0]))
    _add_refusal(_Refusal(exercise, sys._getframe(1), _cell_count()))

