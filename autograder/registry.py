"""What the grader knows of the course's own code, without importing it: where its two packages are installed,
the tests' kit's exercise registry (course_testkit/exercises.py, read as plain Python: no torch in the grader's
process), and how a finished piece named there maps to a file of the course package. Read by the sandbox and the
stripped copies (execution/), the source analysis (source/) and the commands."""
import functools
import importlib.util
from pathlib import Path
from typing import NamedTuple

PACKAGE, KIT = "transformer_course", "course_testkit"   # the course package, the tests' kit
PACKAGES = (PACKAGE, KIT)                                  # what the kernel imports of the course's own code


def package_folder(name=PACKAGE):
    """The folder the package ``name`` (the course package by default) is imported from (None if not installed)."""
    spec = importlib.util.find_spec(name)
    return Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None


@functools.cache
def _registry(kit):
    """The exercise registry (course_testkit/exercises.py) in the kit's folder ``kit``, read without importing
    anything (no torch in the grader's process)."""
    namespace = {}
    exec(compile((Path(kit) / "exercises.py").read_text(encoding="utf-8"), "exercises.py", "exec"), namespace)
    return Registry(*(namespace[field.upper()] for field in Registry._fields))


class Registry(NamedTuple):
    """course_testkit/exercises.py's tables, each described there."""
    notebooks: dict                  # assignment -> its exercises
    finished: dict                   # exercise -> "module.name" of its finished pieces in the package
    test_modules: dict               # assignment -> the name of its probes/ and oracles/ modules
    extras: dict                     # assignment -> the package's extras its install cell installs
    kernel_first_use_imports: dict   # assignment -> slow imports its kernels make on first use
    judges_first_use_imports: dict   # assignment -> slow imports its judges make on first use
    not_compared: frozenset          # exercises the similarity report compares by text only


def registry():
    """The installed tests' kit's exercise registry."""
    return _registry(package_folder(KIT))


def piece_path(piece):
    """(module, name) of a finished piece named as in exercises.FINISHED, "module.name": the module may be one of a
    subpackage ("run.loop.train": ("run.loop", "train")); the name is the last part."""
    module, _, name = piece.rpartition(".")
    if not module or not name:
        raise ValueError(f"{piece!r} is no \"module.name\" of the course package")
    return module, name


def module_file(module):
    """The file, relative to the package's folder, of its module ``module`` (dotted: "run.loop" is run/loop.py)."""
    return Path(*module.split(".")).with_suffix(".py")
