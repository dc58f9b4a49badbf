"""The answers the copy report and the library-answer check compare, read from cells' source without running anything:
an ``Exercise`` holds each owner's ``Answer`` (a student's, or a public source's: the package's finished version, the
course's solutions, the oracles), normalised (normalise.py) with the release's scaffold removed; ``compare`` scores two
of them. The report itself is ``autograder/similarity.py``; the library-answer check is library_answers.py."""
import ast
import builtins
import difflib
import functools
import textwrap
from collections import Counter
from dataclasses import dataclass, field

from ..registry import package_folder
from .normalise import _imported, _without, normalise
from .red_flags import red_flags

PACKAGE = "<course package>"           # the reserved name of the package's finished source

SOLUTIONS = "<course solutions>"       # the course's own answer cells (source/ASSIGNMENT: public in an open course)

ORACLES = "<course oracles"            # "<course oracles: NAME>": a function of the hidden tests' oracles

COPY_THRESHOLD = 0.95                  # a student's answer this close to a public source of it is a copy


@dataclass
class Answer:
    owner: str             # a student id, or PACKAGE
    source: str            # as written, for the person who judges
    lines: list            # normalised token lines, the release's lines removed
    parsed: bool = True    # False: a syntax error, normalised with tokenize
    flags: list = field(default_factory=list)   # RedFlags, for a student's answer

    @functools.cached_property
    def tokens(self):
        """What is compared."""
        return tuple(token for line in self.lines for token in line)

    @property
    def normalised(self):
        """What is compared, shown one line a line."""
        return "\n".join(" ".join(line) for line in self.lines)


def is_reference(owner):
    """Whether an answer is one of the public sources of an answer (the package, the solutions, the oracles)."""
    return owner.startswith("<course ")


@dataclass
class Exercise:
    name: str                                     # as reported: the grade_id, with the notebook if several
    grade_id: str
    stub: str
    shared: frozenset                             # names that are not renamed
    scaffold: Counter                             # the stub's normalised lines
    answers: list = field(default_factory=list)
    unanswered: list = field(default_factory=list)
    notebook: str = ""                            # the release notebook's name

    def add(self, owner, source):
        lines, parsed = normalise(source, self.shared)
        lines = _without(lines, self.scaffold)
        if lines:
            flags = [] if is_reference(owner) else red_flags(source)
            self.answers.append(Answer(owner, source, lines, parsed, flags))
        elif not is_reference(owner):
            self.unanswered.append(owner)


@dataclass
class Pair:
    exercise: str
    a: Answer
    b: Answer
    score: float
    reason: str


def answer_sources(notebook):
    """grade_id -> source of every code answer cell (nbgrader ``solution``) of a notebook."""
    sources = {}
    for cell in notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution") and meta.get("grade_id"):
            sources[meta["grade_id"]] = cell.source
    return sources


def shared_names(release):
    """The names every student shares: builtins, the release's imports, the stubs' classes and functions
    at any depth (methods such as ``forward`` included)."""
    names = set(dir(builtins))
    stubs = set(answer_sources(release).values())
    for cell in release.cells:
        try:
            tree = ast.parse(cell.source) if cell.cell_type == "code" else None
        except (SyntaxError, ValueError):
            continue                          # IPython magics
        if tree is not None:
            names |= _imported(tree)
            if cell.source in stubs:
                names |= {node.name for node in ast.walk(tree)
                          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return frozenset(names)


def release_exercises(release, prefix="", notebook=""):
    """The exercises of one release notebook, named ``prefix + grade_id``, with nothing compared yet."""
    shared = shared_names(release)
    return [Exercise(prefix + grade_id, grade_id, stub, shared, Counter(normalise(stub, shared)[0]), notebook=notebook)
            for grade_id, stub in answer_sources(release).items()]


def add_package_answers(exercises):
    """Add the course package's finished source of each exercise it exports, as ``PACKAGE``."""
    for exercise in exercises:
        finished = finished_source(exercise.grade_id)
        if finished is not None:
            exercise.add(PACKAGE, finished)


def same_text(a, b):
    return " ".join(a.split()) == " ".join(b.split())


@functools.lru_cache(maxsize=None)
def finished_source(name, module="__init__"):
    """The source of the function or class ``name`` that the course package's ``module`` defines or imports,
    read from the package's files: importing the package would import torch (seconds, in the grader's own
    process, for every grading run). None if there is no such function or class."""
    folder = package_folder()
    path = folder / f"{module.replace('.', '/')}.py" if folder else None
    if path is None or not path.is_file():
        return None
    source = path.read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])   # as inspect.getsource
            return textwrap.dedent("".join(source.splitlines(keepends=True)[first - 1:node.end_lineno]))
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            if any(alias.name == name and alias.asname in (None, name) for alias in node.names):
                return finished_source(name, node.module)   # re-exported: follow it to its definition
    return None


def compare(exercise, a, b, threshold):
    matcher = difflib.SequenceMatcher(None, a.tokens, b.tokens, autojunk=False)
    # the quick ratios are upper bounds of ratio(): most pairs stop there
    if matcher.real_quick_ratio() < threshold or matcher.quick_ratio() < threshold:
        return None
    score = matcher.ratio()
    return Pair(exercise, a, b, score, _reason(matcher, a, b)) if score >= threshold else None


def _reason(matcher, a, b):
    if same_text(a.source, b.source):
        why = "the same source"
    elif a.tokens == b.tokens:
        why = "the same code once names, comments and formatting are normalised"
    else:
        sizes = [block.size for block in matcher.get_matching_blocks()]
        why = (f"{sum(sizes)} of {len(a.tokens)} and {len(b.tokens)} normalised tokens match, "
               f"the longest run {max(sizes)}")
    unparsed = [answer.owner for answer in (a, b) if not answer.parsed]
    if unparsed:
        why += f"; {' and '.join(unparsed)}: a syntax error, compared token by token"
    return why
