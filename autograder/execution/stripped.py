"""The course package as the grading kernel of one notebook sees it: without the answers it must not use.

The package ships the finished version of every exercise, since later notebooks import them. While
notebook N is graded, the sandbox shows the kernel, at the package's own path, a copy in which the finished
exercises of notebook N and of every later notebook (exercises.FINISHED: the answer and the package's
helpers that do its work) only raise ``NotImplementedError``: their bodies are replaced in the source files, so no
import, alias, ``inspect.getsource`` or read of the file finds the finished code. Signatures, docstrings,
class hierarchies, module-level names and imports stay, so ``import transformer_course`` works, and so do
the earlier notebooks' finished parts, which notebook N imports. Line numbers stay too: tracebacks through
the parts that remain point at the right lines.

The tests' kit (course_testkit) goes beside it, without the judges' oracles once every test cell of the notebook is
judged in the grader: a copy is a folder holding both packages, each shown at its own path.

Each copy is built once per assignment and package source (a folder in a cache of the grader's user), by
whichever process grades first: the local pool's workers and Dask workers alike build and reuse their own.
"""
import ast
import compileall
import hashlib
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from ..registry import KIT, PACKAGE, PACKAGES, _registry, module_file, package_folder, piece_path

ORACLES = "oracles"


def withheld(assignment, kit=None):
    """{(module, name): (exercise, whether it is the answer itself)} of what ``assignment``'s copy withholds:
    the finished parts of its exercises and of the later notebooks', but no helper an earlier one needs. ``module``
    is dotted for a module of a subpackage ("run.loop.train": ("run.loop", "train"))."""
    notebooks, finished = _registry(kit or package_folder(KIT))[:2]
    order = list(notebooks)
    # A notebook of another name (renamed by an instructor, say) fails closed: it sees no finished exercise.
    first = order.index(assignment) if assignment in notebooks else 0
    later = {e for a in order[first:] for e in notebooks[a]}
    pieces = {exercise: tuple(piece_path(piece) for piece in parts) for exercise, parts in finished.items()}
    needed = {piece for exercise, parts in pieces.items() if exercise not in later for piece in parts}
    found = {}
    for exercise, parts in pieces.items():
        for position, piece in enumerate(parts):
            if exercise in later and piece not in needed:
                found.setdefault(piece, (exercise, position == 0))
    return found


def _message(assignment, module, name, exercise, answer):
    what = f"the course's finished `{exercise}`" if answer else \
        f"`{module}.{name}`, part of the course's finished `{exercise}`,"
    return (f"{what} is not available while notebook {assignment} is graded: the package's version is there "
            f"for the later notebooks; here, write your own")


def _body_spans(node):
    """(start, end) positions of what to replace in each function of ``node`` (a function: its body; a class:
    each method's body), docstrings left in place. An empty end: insert after the docstring."""
    functions = [node] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else [
        n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    spans = []
    for function in functions:
        body = function.body[1:] if ast.get_docstring(function, clean=False) is not None else function.body
        if body:
            spans.append(((body[0].lineno, body[0].col_offset), (body[-1].end_lineno, body[-1].end_col_offset)))
        else:   # a docstring only
            docstring = function.body[0]
            spans.append(((docstring.end_lineno, docstring.end_col_offset), None))
    return spans


def strip_source(text, names, assignment, module):
    """The module's source ``text`` with the bodies of ``names`` ({name: (exercise, answer)}) raising
    NotImplementedError; every line stays where it was."""
    lines = text.encode("utf-8").splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    data = b"".join(lines)
    edits = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            statement = f"raise NotImplementedError({_message(assignment, module, node.name, *names[node.name])!r})"
            for (line, column), end in _body_spans(node):
                begin = starts[line - 1] + column
                if end is None:
                    edits.append((begin, begin, f"; {statement}".encode()))
                else:
                    stop = starts[end[0] - 1] + end[1]
                    edits.append((begin, stop, statement.encode() + b"\n" * data[begin:stop].count(b"\n")))
    for begin, stop, replacement in sorted(edits, reverse=True):
        data = data[:begin] + replacement + data[stop:]
    stripped = data.decode("utf-8")
    ast.parse(stripped)   # a rewrite that broke the module must fail here, not in every kernel
    return stripped


def _digest(sources, keep_oracles):
    """What a copy depends on: the packages' files, this module, the Python that compiles it, where they are seen."""
    digest = hashlib.sha256(f"{sys.version}\0{sorted(sources.items())}\0{keep_oracles}\0".encode())
    digest.update(Path(__file__).read_bytes())
    for source in sources.values():
        for path in sorted(Path(source).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(path.relative_to(source).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def cache_folder():
    """The grader's user's own folder of copies: a folder in the shared temporary directory that somebody
    else made could hold a package with the finished answers in it."""
    folder = Path(tempfile.gettempdir()) / f"autograder-packages-{os.geteuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise PermissionError(f"{folder} is not a folder of this user's own: remove it")
    return folder


def installed_sources():
    """{package name: the folder it is imported from} of the course package and the tests' kit."""
    return {name: package_folder(name) for name in PACKAGES}


def build(assignment, target, keep_oracles=True, sources=None):
    """Write ``assignment``'s copy of the course package and the kit into ``target`` (a new folder: one folder per
    package), each compiled as if it were where the sandbox shows it (its source folder), readable by the sandbox's
    user."""
    sources = sources or installed_sources()
    ignored = ["__pycache__", "*.pyc"]
    shutil.copytree(sources[PACKAGE], Path(target) / PACKAGE, ignore=shutil.ignore_patterns(*ignored))
    kit_ignored = ignored + ([] if keep_oracles else [ORACLES])
    shutil.copytree(sources[KIT], Path(target) / KIT, ignore=shutil.ignore_patterns(*kit_ignored))
    by_module = {}
    for (module, name), owner in withheld(assignment, sources[KIT]).items():
        by_module.setdefault(module, {})[name] = owner
    for module, names in by_module.items():
        path = Path(target) / PACKAGE / module_file(module)
        path.write_text(strip_source(path.read_text(encoding="utf-8"), names, assignment, module), encoding="utf-8")
    # Compiled once here, since the kernel may not write beside a read-only package; named by the path it has there.
    for name, source in sources.items():
        compileall.compile_dir(str(Path(target) / name), ddir=str(source), quiet=2)
    for folder, _, files in os.walk(target):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def stripped_package(assignment, keep_oracles=True):
    """The folder of ``assignment``'s copy of the course package and the tests' kit (``transformer_course/`` and
    ``course_testkit/`` in it), built on the first call for these sources (an assignment that is not one of the
    course's notebooks sees no finished exercise); None when either is not installed.
    ``keep_oracles``: with the judges' oracles (``course_testkit/oracles``), which the hidden tests of the
    notebooks still judged in the kernel import."""
    sources = installed_sources()
    if None in sources.values():
        return None
    root = cache_folder()
    target = root / f"{assignment}-{'with' if keep_oracles else 'no'}-oracles-{_digest(sources, keep_oracles)}"
    if target.is_dir():
        return target
    building = Path(tempfile.mkdtemp(prefix=f".{assignment}-", dir=root))
    try:
        build(assignment, building / "packages", keep_oracles, sources)
        try:
            os.rename(building / "packages", target)   # atomic: a copy is seen whole or not at all
        except OSError:
            if not target.is_dir():   # not another worker's copy of the same package, made meanwhile
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target
