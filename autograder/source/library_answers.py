"""Answers that are someone else's code, found in the answer cells' source without running anything.

Two kinds of answer score nothing in their exercise's test cells (``test_<exercise>``, ``test_<exercise>_*``):

* **a library's finished version** where the exercise is to write it: ``F.layer_norm`` in ``LayerNorm``,
  ``F.scaled_dot_product_attention`` in ``scaled_dot_product_attention``, ``nn.MultiheadAttention`` in
  ``MultiHeadAttention``, ``nn.Transformer*`` in notebook 06, sacreBLEU, NLTK, torchmetrics or ``evaluate``
  in ``corpus_bleu``, ``label_smoothing=`` in ``label_smoothing_loss``. These are the hidden tests' oracles:
  an answer that calls them passes every test without being written. Names are followed through imports
  (``from torch.nn.functional import layer_norm as ln``, ``import torch.nn.functional as fn``), assignments
  (``fn = torch.nn.functional``), ``getattr`` with a constant name, ``vars(...)[...]``, ``importlib``,
  ``sys.modules`` and ``eval``/``exec`` of a constant string, through every code cell up to the answer (the
  setup cell's ``torch``, ``nn`` and ``F`` included);
* **a copy of the course package's finished version** (the package ships them for the later notebooks),
  verbatim or with names, comments, docstrings and layout changed: the similarity report's normalisation
  (normalise.py), a score of ``COPY_THRESHOLD`` or more against the package's source of that exercise.

Not seen: a name computed at run time (``getattr(F, name)`` with a variable ``name``), or a library call inside
a helper that the student defined in a cell of its own and calls from the answer.

The grader's worker (execution/dispatch.py, after executing a submission) adds an error output to each test cell of a
flagged exercise (``refuse_flagged``), so that nbgrader scores it 0 and the feedback says why; ``python -m autograder check``
warns before hand-in.
"""
import ast
import builtins
from dataclasses import dataclass
from typing import Callable

import nbformat

from ..cells import exercise_of, grade_id, is_answer, is_test
from ..registry import registry
from .answers import COPY_THRESHOLD, PACKAGE, add_package_answers, answer_sources, compare, release_exercises

ENAME = "NotYourOwnWork"
ANSWER = "<answer>"                  # the owner of the student's answer among similarity.py's Answers
SETUP = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "math": "math"}   # the setup cell's

# ----------------------------------------------------------------------------- what is off-limits, where

@dataclass(frozen=True)
class Rule:
    exercises: tuple
    forbids: Callable          # dotted path -> whether it is off-limits
    what: str                  # what the path is, for the message
    instead: str
    oracle: str
    when: Callable = None      # (Call) -> bool: only such calls are off-limits, not the path itself


def _torch(test):
    """Paths of torch with a part that passes ``test``: F.x, nn.functional.x, torch.x, torch.ops.aten.x, ..."""
    return lambda path: path.split(".")[0] == "torch" and any(test(part) for part in path.split(".")[1:])


def _package(root, test=lambda part: True):
    return lambda path: path.split(".")[0] == root and any(test(part) for part in path.split("."))


def _bleu(part):
    return "bleu" in part.lower()


def _smoothing_keyword(call):
    """A cross-entropy call given label smoothing: the keyword (not a constant 0), or all its positions."""
    func = call.func_path
    positions = 6 if func.endswith("CrossEntropyLoss") else 8
    given = [k.value for k in call.node.keywords if k.arg == "label_smoothing"]
    return (any(not (isinstance(v, ast.Constant) and v.value == 0) for v in given)
            or len(call.node.args) - call.skipped >= positions)


def _loads_bleu(call):
    names = [call.names.text(a) for a in call.node.args[:1]] + [call.names.text(k.value) for k in call.node.keywords
                                                                  if k.arg in ("path", "metric_name")]
    return any(name and "bleu" in name.lower() for name in names)


_BLEU_INSTEAD = "the exercise asks you to count the clipped n-gram matches and the brevity penalty yourself"
_BLEU_ORACLE = "sacreBLEU is used by the tests to check your answer"
RULES = [
    Rule(("LayerNorm",), _torch(lambda p: p in ("layer_norm", "LayerNorm", "native_layer_norm", "group_norm",
                                                  "GroupNorm", "native_group_norm")),
         "PyTorch's finished layer norm", "the exercise asks you to write it yourself from the mean and the variance",
         "F.layer_norm is used by the tests to check your answer"),
    Rule(("scaled_dot_product_attention",),
         _torch(lambda p: p.startswith(("scaled_dot_product", "_scaled_dot_product")) or p == "flex_attention"),
         "PyTorch's finished attention",
         "the exercise asks you to write it yourself: scores, scale, mask, softmax, weighted sum",
         "F.scaled_dot_product_attention is used by the tests to check your answer"),
    Rule(("MultiHeadAttention",),
         _torch(lambda p: p in ("MultiheadAttention", "multi_head_attention_forward", "_native_multi_head_attention")),
         "PyTorch's finished multi-head attention",
         "the exercise asks you to project, split the heads, attend and merge them yourself",
         "nn.MultiheadAttention is used by the tests to check your answer"),
    Rule(registry().notebooks["06_transformer"],
         _torch(lambda p: p in ("Transformer", "TransformerEncoder", "TransformerEncoderLayer", "TransformerDecoder",
                                "TransformerDecoderLayer")),
         "one of PyTorch's finished Transformer modules",
         "the exercise asks you to build it yourself from the pieces of the earlier notebooks and exercises",
         "nn.Transformer and its layers are used by the tests to check your answer"),
    Rule(("corpus_bleu",), _package("sacrebleu"), "sacreBLEU, a finished BLEU", _BLEU_INSTEAD, _BLEU_ORACLE),
    Rule(("corpus_bleu",), _package("nltk", _bleu), "NLTK's finished BLEU", _BLEU_INSTEAD, _BLEU_ORACLE),
    Rule(("corpus_bleu",), _package("torchmetrics", _bleu), "torchmetrics' finished BLEU", _BLEU_INSTEAD, _BLEU_ORACLE),
    Rule(("corpus_bleu",), _package("torchtext", _bleu), "torchtext's finished BLEU", _BLEU_INSTEAD, _BLEU_ORACLE),
    Rule(("corpus_bleu",), lambda path: path in ("evaluate.load", "datasets.load_metric"),
         "a finished BLEU of the evaluate library", _BLEU_INSTEAD, _BLEU_ORACLE, when=_loads_bleu),
    Rule(("label_smoothing_loss",), _torch(lambda p: p in ("cross_entropy", "CrossEntropyLoss")),
         "PyTorch's built-in label smoothing",
         "the exercise asks you to build the smoothed targets and their cross-entropy yourself, from log_softmax",
         "F.cross_entropy(..., label_smoothing=...) is used by the tests to check your answer", when=_smoothing_keyword),
]



def _finished(exercise):
    """The course package's finished ``exercise`` (transformer_course.X, transformer_course.module.X)."""
    return lambda path: path.split(".")[0] == "transformer_course" and path.split(".")[-1] == exercise


# The package's finished version of the exercise itself: the grading kernel's copy of the package mostly lacks it
# (execution/stripped.py), but plain nbgrader has it all.
RULES += [Rule((exercise,), _finished(exercise), f"the course's finished `{exercise}`",
               "the package's version is there for the later notebooks", "here, write your own")
          for exercises in registry().notebooks.values() for exercise in exercises]


# ----------------------------------------------------------------------------- what names stand for

class Names:
    """What the names of a notebook's kernel stand for, as far as its source shows: name -> dotted path."""

    def __init__(self):
        self.bound = dict(SETUP)
        self.star = []              # modules imported with *

    def learn(self, tree):
        """Take in a cell's imports, and its assignments of a name to a path (``fn = torch.nn.functional``); any
        other name it binds (a loop variable, an argument, a function) stands for nothing known."""
        assigned = set()            # the targets of the assignments taken in: not bound a second time
        for node in in_order(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    self.bound[name] = alias.name if alias.asname else name
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        self.star.append(node.module)
                    else:
                        self.bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                paths = self.paths(node.value)
                for target in getattr(node, "targets", [getattr(node, "target", None)]):
                    if isinstance(target, ast.Name):
                        self._bind(target.id, paths)
                        assigned.add(target)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._bind(node.name, [])
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node not in assigned:
                self._bind(node.id, [])
            elif isinstance(node, ast.arg):
                self._bind(node.arg, [])

    def _bind(self, name, paths):
        # None: bound to something the source does not name (no longer the module or function it was, and
        # not a name of a module imported with *)
        self.bound[name] = paths[0] if paths else None

    def paths(self, node):
        """The dotted paths ``node`` may stand for ([] when the source does not say)."""
        if isinstance(node, ast.Name):
            if node.id in self.bound:
                return [self.bound[node.id]] if self.bound[node.id] else []
            return [f"{m}.{node.id}" for m in self.star] + ([f"builtins.{node.id}"] if hasattr(builtins, node.id) else [])
        if isinstance(node, ast.Attribute):
            return [f"{path}.{node.attr}" for path in self.paths(node.value)]
        if isinstance(node, ast.Call):
            return self._call_paths(node)
        if isinstance(node, ast.Subscript):
            return self._subscript_paths(node)
        return []

    def _call_paths(self, node):
        """getattr(x, "name"), importlib.import_module("path"), __import__("path")."""
        func, args = self.paths(node.func), node.args
        constants = [self.text(a) for a in args]
        if "builtins.getattr" in func and len(args) >= 2 and constants[1]:
            return [f"{path}.{constants[1]}" for path in self.paths(args[0])]
        if "importlib.import_module" in func and constants and constants[0]:
            return [constants[0]]
        if "builtins.__import__" in func and constants and constants[0]:
            fromlist = len(args) > 3 or any(k.arg == "fromlist" for k in node.keywords)
            return [constants[0] if fromlist else constants[0].split(".")[0]]
        return []

    def _subscript_paths(self, node):
        """vars(x)["name"], x.__dict__["name"], sys.modules["path"]."""
        key, inner = self.text(node.slice), node.value
        if not key:
            return []
        if isinstance(inner, ast.Call) and "builtins.vars" in self.paths(inner.func) and inner.args:
            return [f"{path}.{key}" for path in self.paths(inner.args[0])]
        if isinstance(inner, ast.Attribute) and inner.attr == "__dict__":
            return [f"{path}.{key}" for path in self.paths(inner.value)]
        return [key] if "sys.modules" in self.paths(inner) else []

    def text(self, node):
        """The value of a constant string expression ("layer" + "_norm", f"layer_{'norm'}"), else None."""
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.text(node.left), self.text(node.right)
            return left + right if left is not None and right is not None else None
        if isinstance(node, ast.JoinedStr):
            parts = [self.text(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values]
            return "".join(parts) if all(p is not None for p in parts) else None
        return None


def in_order(tree):
    """The nodes of a tree in the order of the source (a call before its function, at the same place)."""
    return sorted(ast.walk(tree), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))


def parsed(source, names=None):
    """The trees of a cell: its own, and those of constant strings it hands to eval or exec. A cell Python
    cannot parse (IPython magics) is read as IPython runs it; one that still does not parse gives none."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        tree = _parse_as_ipython(source)
    if tree is None:
        return []
    trees, names = [tree], names or Names()
    for node in ast.walk(tree):
        code = _code_argument(node, names) if isinstance(node, ast.Call) else None
        if code:
            trees += parsed(code, names)
    return trees


def _parse_as_ipython(source):
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        return ast.parse(TransformerManager().transform_cell(source))
    except Exception:  # no IPython (optional here), or a cell that is not Python even for IPython
        return None


def _code_argument(call, names):
    """The constant code a call runs: eval("..."), exec("..."), and the body of a %%magic or a %magic's line
    (IPython writes them as get_ipython().run_cell_magic(name, line, body), .run_line_magic(name, line))."""
    magic = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if magic in ("run_cell_magic", "run_line_magic"):
        position = 2 if magic == "run_cell_magic" else 1
        return names.text(call.args[position]) if len(call.args) > position else None
    if call.args and {"builtins.eval", "builtins.exec"} & set(names.paths(call.func)):
        return names.text(call.args[0])
    return None


# ----------------------------------------------------------------------------- finding the library's answers

@dataclass
class Call:
    """A call as a rule's ``when`` sees it: ``functools.partial(f, ...)`` counts as a call of ``f``."""
    node: ast.Call
    func_path: str
    skipped: int               # leading positional arguments that are not the call's own (partial's function)
    names: Names


@dataclass
class Hit:
    rule: Rule
    verb: str                  # "calls", "imports", "uses"
    spelling: str              # as the answer writes it
    path: str                  # what it stands for

    @property
    def message(self):
        short = _short(self.path)
        spelling = self.spelling if len(self.spelling) <= 50 else short    # the feedback page cuts long messages
        aka = "" if short in (spelling, self.path) else f" ({short})"
        return f"this answer {self.verb} {spelling}{aka}, {self.rule.what}: {self.rule.instead}; {self.rule.oracle}"


def _short(path):
    """torch.nn.functional.x -> F.x, torch.nn.X -> nn.X: as the notebooks write them."""
    for prefix, short in (("torch.nn.functional.", "F."), ("torch.nn.", "nn.")):
        if path.startswith(prefix):
            return short + path[len(prefix):]
    return path


def _calls(node, names):
    """The calls ``node`` makes, as the rules see them."""
    paths = names.paths(node.func)
    found = [Call(node, path, 0, names) for path in paths]
    if "functools.partial" in paths and node.args:
        found += [Call(node, path, 1, names) for path in names.paths(node.args[0])]
    return found


def _hits_at(node, names, rules):
    """The rules broken at one node: an import of a forbidden path, a forbidden call, a forbidden path used."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        modules = [] if isinstance(node, ast.Import) else [node.module or ""]
        targets = [a.name if isinstance(node, ast.Import) else f"{node.module}.{a.name}" for a in node.names] + modules
        return [Hit(r, "imports", _short(path), path) for path in targets for r in rules
                if r.when is None and r.forbids(path)]
    if isinstance(node, ast.Call):
        called = [Hit(r, "calls", ast.unparse(call.node.func if not call.skipped else call.node.args[0]), call.func_path)
                  for call in _calls(node, names) for r in rules
                  if r.forbids(call.func_path) and (r.when is None or r.when(call))]
        return called + [Hit(r, "uses", ast.unparse(node), path) for path in names.paths(node) for r in rules
                         if r.when is None and r.forbids(path)]       # getattr(nn, "LayerNorm") not called here
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, (ast.Store, ast.Del)):
        return [Hit(r, "uses", ast.unparse(node), path) for path in names.paths(node) for r in rules
                if r.when is None and r.forbids(path)]
    return []


def library_hits(source, rules, names=None):
    """The first place where ``source`` (an answer cell) breaks each of ``rules``, in the order of the source.
    ``names``: what the names stand for in the cells before it (by default, the setup cell's)."""
    names, found = names or Names(), {}
    trees = parsed(source, names)
    for tree in trees:
        names.learn(tree)
    for tree in trees:
        for node in in_order(tree):
            for hit in _hits_at(node, names, rules):
                found.setdefault(hit.rule, hit)
    return list(found.values())


def library_answers(notebook):
    """exercise -> message, for each answer cell of ``notebook`` that uses a library's finished version of its
    exercise. Names are followed through the notebook's code cells in order, up to each answer."""
    names, flagged = Names(), {}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        exercise = grade_id(cell) if is_answer(cell) else None
        rules = [r for r in RULES if exercise in r.exercises]
        if rules:
            hits = library_hits(cell.source, rules, names)
            if hits:
                flagged[exercise] = hits[0].message
        else:
            for tree in parsed(cell.source, names):
                names.learn(tree)
    return flagged


# ----------------------------------------------------------------------------- copies of the package's answers

def package_pairs(notebook, release):
    """exercise -> similarity.py's Pair of its answer in ``notebook`` and the course package's finished version
    (only the exercises that have both: an untouched stub is no answer)."""
    answers, pairs = answer_sources(notebook), {}
    exercises = release_exercises(release)
    for exercise in exercises:
        exercise.add(ANSWER, answers.get(exercise.grade_id, exercise.stub))
    add_package_answers(exercises)
    for exercise in exercises:
        mine = [a for a in exercise.answers if a.owner == ANSWER]
        package = [a for a in exercise.answers if a.owner == PACKAGE]
        if mine and package:
            pairs[exercise.grade_id] = compare(exercise.name, mine[0], package[0], 0.0)
    return pairs


def copied_answers(notebook, release, threshold=COPY_THRESHOLD):
    """exercise -> message, for each answer of ``notebook`` that is the course package's finished version,
    names, comments, docstrings and layout aside (similarity.py), with a score of ``threshold`` or more."""
    return {exercise: (f"this answer is the course's finished {exercise}, from the transformer_course package "
                       f"({pair.reason}; similarity {pair.score:.2f}): the package's version is there for the "
                       "later notebooks; the exercise asks you to write your own")
            for exercise, pair in package_pairs(notebook, release).items()
            if pair.score >= threshold and exercise not in registry().not_compared}


def flagged_answers(notebook, release=None):
    """exercise -> why its answer is someone else's code: a library's finished version, or (given the release
    notebook, whose stubs similarity.py leaves out of the comparison) a copy of the course's finished one."""
    copied = copied_answers(notebook, release) if release is not None else {}
    return {**copied, **library_answers(notebook)}


def refuse_flagged(notebook, release=None):
    """Add an error output with the reason to every test cell of each flagged exercise (nbgrader scores a cell
    with an error 0); returns what was flagged."""
    flagged = flagged_answers(notebook, release)
    for cell in notebook.cells:
        exercise = exercise_of(grade_id(cell), list(flagged)) if is_test(cell) else None
        if exercise is not None:
            cell.outputs.append(nbformat.v4.new_output("error", ename=ENAME, evalue=flagged[exercise], traceback=[
                f"{ENAME}: {flagged[exercise]}"]))
    return flagged
