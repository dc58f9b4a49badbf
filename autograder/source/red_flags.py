"""Red flags: what a cell's source uses that no exercise needs, found without running it.

An exercise needs none of: the call stack's frames, closures, code objects, ``sys.modules``, import hooks,
trace, profile or monitoring hooks, the kernel (``get_ipython``, its event callbacks, ``set_custom_exc``),
``os._exit``, threads or processes, ``ctypes``, the garbage collector's object lists, or ``exec``/``eval``/
``compile`` of a string built at run time. They are how an answer reads the hidden tests while they run or
steers the kernel. ``red_flags`` finds them in the source with ``ast`` (names followed through the cell's
imports; a cell that does not parse, token by token), each with a short label and the line, for a person to
look at, not a verdict.
"""
import ast
import re
import tokenize
from dataclasses import dataclass

from .normalise import _tokens


@dataclass(frozen=True, order=True)
class RedFlag:
    line: int              # in the cell
    label: str             # what it uses: "frame: sys._getframe"

    def __str__(self):
        return f"{self.label} (line {self.line})"


# A name part that means the same wherever it stands (an attribute, an imported name, a string): the label.
_FLAGGED_PARTS = {
    **{part: f"frame: {part}" for part in ("f_back", "f_locals", "f_globals", "f_code", "f_builtins", "tb_frame",
                                           "gi_frame", "cr_frame")},
    "_getframe": "frame: sys._getframe", "_current_frames": "frame: sys._current_frames",
    "currentframe": "frame: inspect.currentframe", "getouterframes": "frame: inspect.getouterframes",
    "getframeinfo": "frame: inspect.getframeinfo",
    "__closure__": "closure: __closure__", "cell_contents": "closure: cell_contents",
    **{part: f"code object: {part}" for part in ("__code__", "co_consts", "co_code", "co_names")},
    "__globals__": "globals: __globals__", "__builtins__": "builtins: __builtins__",
    "meta_path": "import hook: sys.meta_path", "path_hooks": "import hook: sys.path_hooks",
    "path_importer_cache": "import hook: sys.path_importer_cache", "__import__": "import hook: __import__",
    "settrace": "trace hook: settrace", "setprofile": "profile hook: setprofile",
    "get_ipython": "kernel: get_ipython", "set_custom_exc": "kernel: set_custom_exc",
    "excepthook": "kernel: excepthook", "displayhook": "kernel: displayhook",
    "_exit": "exit: os._exit",
    "get_objects": "gc: gc.get_objects", "get_referrers": "gc: gc.get_referrers",
    "get_referents": "gc: gc.get_referents",
}
# Parts that mean it only after their module (``model.modules()`` and ``torch.stack`` are ordinary).
_FLAGGED_PAIRS = {
    ("sys", "modules"): "sys.modules", ("sys", "monitoring"): "monitoring hook: sys.monitoring",
    ("inspect", "stack"): "frame: inspect.stack", ("inspect", "trace"): "frame: inspect.trace",
    ("importlib", "abc"): "import hook: importlib.abc", ("events", "register"): "event callback: events.register",
}
# Modules, flagged where imported or where a name's attribute is taken from them (``threading.Thread``).
_FLAGGED_MODULES = {
    "threading": "threads: threading", "_thread": "threads: _thread", "concurrent": "threads: concurrent.futures",
    "multiprocessing": "processes: multiprocessing", "subprocess": "processes: subprocess", "ctypes": "ctypes",
    "IPython": "kernel: IPython", "ipykernel": "kernel: ipykernel", "builtins": "builtins: builtins",
    "signal": "signal handler: signal",
}
_CODE_RUNNERS = {"exec", "eval", "compile", "builtins.exec", "builtins.eval", "builtins.compile"}
_DISPLAY = ("IPython", "display")      # IPython.display shows HTML and plots: notebooks use it (08's demo)


def red_flags(source):
    """The RedFlags of a cell's source, sorted by line: what it uses that an exercise never needs."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return sorted(set(_token_flags(source)))      # IPython magics, or an unfinished cell
    return sorted(set(_tree_flags(tree)))


def _labels(dotted, as_module):
    """The labels of a dotted name (``sys._getframe``); ``as_module``: its first part may be a module."""
    parts = dotted.split(".")
    found = [_FLAGGED_PARTS[part] for part in parts if part in _FLAGGED_PARTS]
    found += [label for pair, label in _FLAGGED_PAIRS.items()
              if any(tuple(parts[i:i + 2]) == pair for i in range(len(parts) - 1))]
    if as_module and parts[0] in _FLAGGED_MODULES and tuple(parts[:2]) != _DISPLAY:
        found.append(_FLAGGED_MODULES[parts[0]])
    return found


def _tree_flags(tree, at=None):
    """RedFlags of a parsed cell; ``at``: the line of the ``exec`` that runs it, for all of them."""
    aliases = _aliases(tree)
    for node in ast.walk(tree):
        line = at or getattr(node, "lineno", 1)
        if isinstance(node, (ast.Attribute, ast.Name)):
            dotted = _dotted(node, aliases)
            labels = _labels(dotted, "." in dotted)
        elif isinstance(node, ast.Import):
            labels = [label for alias in node.names for label in _labels(alias.name, True)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            labels = [label for alias in node.names for label in _labels(f"{node.module}.{alias.name}", True)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.fullmatch(node.value):
            labels = _labels(node.value, True)                # getattr(frame, "f_locals"), "threading"
        elif isinstance(node, ast.Call) and _dotted(node.func, aliases) in _CODE_RUNNERS:
            yield from _run_code_flags(node, _dotted(node.func, aliases), line)
            continue
        else:
            continue
        yield from (RedFlag(line, label) for label in labels)


_DOTTED = re.compile(r"[A-Za-z_][\w.]*")


def _run_code_flags(call, name, line):
    """exec/eval/compile: a constant string is read like the cell; another is code no one can see here."""
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        try:
            yield from _tree_flags(ast.parse(first.value), line)
            return
        except (SyntaxError, ValueError):
            pass
    yield RedFlag(line, f"dynamic code: {name} of a built string")


def _aliases(tree):
    """Name -> what the cell's imports bound it to: ``s`` -> ``sys``, ``g`` -> ``sys._getframe``."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({alias.asname: alias.name for alias in node.names if alias.asname})
        elif isinstance(node, ast.ImportFrom) and node.module:
            aliases.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
    return aliases


def _dotted(node, aliases):
    """``a.b.c`` for an attribute chain, its first name through the aliases; a chain that starts at a call
    (``get_ipython().events``) starts with an empty part."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    parts.append(aliases.get(node.id, node.id) if isinstance(node, ast.Name) else "")
    return ".".join(reversed(parts))


def _token_flags(source):
    """The labels of the dotted names of a cell that does not parse (``%time sys._getframe(1)``)."""
    tokens = [t for t in _tokens(source) if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]
    i = 0
    while i < len(tokens):
        if tokens[i].type != tokenize.NAME:
            i += 1
            continue
        j, parts = i, [tokens[i].string]
        while j + 2 < len(tokens) and tokens[j + 1].string == "." and tokens[j + 2].type == tokenize.NAME:
            parts.append(tokens[j + 2].string)
            j += 2
        imported = i > 0 and tokens[i - 1].string in ("import", "from")
        yield from (RedFlag(tokens[i].start[0], label) for label in _labels(".".join(parts), imported or j > i))
        i = j + 1
