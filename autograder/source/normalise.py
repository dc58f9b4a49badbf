"""An answer's source normalised for comparison, without running it: what the similarity report compares.

* **Normalising.** The answer is parsed with ``ast``: comments go, and so does every statement that is
  only a string (docstrings, strings used as comments). Names are then made canonical (below) and the
  tree is written back with ``ast.unparse``, so that formatting disappears too. A cell that does not
  parse falls back to ``tokenize`` with the same rules, token by token.
* **Names.** Every name a student chose (variables, arguments, helper functions) becomes a placeholder
  ``v1``, ``v2``, ... in the order of first appearance, so that renaming variables does not hide a copy.
  Names every student shares stay: Python's builtins, what the release notebook imports or defines
  (``torch``, ``nn``, ``F``, ``math``, the exercises) and the stubs' class and method names, as do
  attribute names and keyword-argument names. Which library a student calls, and how, is the
  substance of an answer; hiding it would make every answer of the same length look alike.
* **The scaffold.** ``_without`` takes the release's own lines, normalised the same way, out of an answer's.
"""
import ast
import io
import keyword
import tokenize
from collections import Counter

_SKIPPED = {tokenize.ENCODING, tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENDMARKER}


def normalise(source, shared):
    """The normalised logical lines of ``source`` (tuples of token strings), and whether it parsed."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return _fallback_lines(source, shared), False
    _drop_strings(tree)
    _Renamer(_placeholders(tree, shared | _imported(tree))).visit(tree)
    return _token_lines(ast.unparse(tree)), True


def _drop_strings(tree):
    """Remove docstrings and other statements that are only a string: they are prose, not code."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                            and isinstance(s.value.value, str))]
            node.body = kept or ([] if isinstance(node, ast.Module) else [ast.Pass()])


def _imported(tree):
    """Names bound by imports in the cell: module names, which carry meaning like library calls."""
    return {(alias.asname or alias.name).split(".")[0] for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}


def _placeholders(tree, shared):
    """name -> 'v1', 'v2', ... for the names a student chose, in the order they first appear."""
    found = sorted((node.lineno, node.col_offset, name) for node in ast.walk(tree)
                   for name in _names_at(node) if name not in shared)
    mapping = {}
    for _, _, name in found:
        mapping.setdefault(name, f"v{len(mapping) + 1}")
    return mapping


def _names_at(node):
    """The names a node binds or uses (not attributes, keyword arguments or imports)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return node.names
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    return []


class _Renamer(ast.NodeTransformer):
    """Apply a name mapping to every place a chosen name stands; attributes and keywords are kept."""

    def __init__(self, mapping):
        self.mapping = mapping

    def rename(self, name):
        return self.mapping.get(name, name)

    def generic_visit(self, node):
        for attribute in ("id", "arg", "name"):
            value = getattr(node, attribute, None)
            if isinstance(value, str) and not isinstance(node, (ast.keyword, ast.alias)):
                setattr(node, attribute, self.rename(value))
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            node.names = [self.rename(name) for name in node.names]
        return super().generic_visit(node)


def _tokens(text):
    """tokenize's tokens of ``text``; those before a tokenize error when it has one."""
    result = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            result.append(token)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass                       # an unfinished cell: compare what could be read
    return result


def _split_lines(tokens):
    """Group token strings into logical lines, leaving out comments and layout."""
    lines, line = [], []
    for token in tokens:
        if token.type == tokenize.NEWLINE and line:
            lines.append(tuple(line))
            line = []
        elif token.type not in _SKIPPED:
            line.append(token.string)
    return lines + ([tuple(line)] if line else [])


def _token_lines(text):
    return _split_lines(_tokens(text))


def _fallback_lines(source, shared):
    """The rules of the ``ast`` path applied to tokens, for a cell with a syntax error."""
    tokens = [t for t in _tokens(source) if t.type not in (tokenize.COMMENT, tokenize.NL)]
    mapping, out, depth, signature = {}, [], 0, False
    for i, token in enumerate(tokens):
        if token.type == tokenize.OP:
            depth += (token.string in ("(", "[", "{")) - (token.string in (")", "]", "}"))
        signature = token.string == "def" or (signature and token.type != tokenize.NEWLINE)
        if token.type == tokenize.NAME and not _kept_name(tokens, i, shared, depth > 0 and not signature):
            token = token._replace(string=mapping.setdefault(token.string, f"v{len(mapping) + 1}"))
        elif token.type in (tokenize.NUMBER, tokenize.STRING):
            token = token._replace(string=_literal(token.string))
        out.append(token)
    return [line for line in _split_lines(out) if not all(t[:1] in "'\"" for t in line)]   # docstrings


def _kept_name(tokens, i, shared, in_call):
    """Is the NAME token ``tokens[i]`` one the ``ast`` path keeps: a keyword, a shared name, an attribute
    or, in a call (not a signature, whose defaults name parameters), a keyword argument?"""
    name = tokens[i].string
    before = tokens[i - 1].string if i else ""
    after = tokens[i + 1].string if i + 1 < len(tokens) else ""
    return (keyword.iskeyword(name) or keyword.issoftkeyword(name) or name in shared or before == "."
            or (in_call and after == "=" and before in ("(", ",")))


def _literal(text):
    """A literal as ``ast.unparse`` writes it (1e-5 -> 1e-05, "a" -> 'a'), so both paths agree."""
    try:
        return repr(ast.literal_eval(text))
    except (ValueError, SyntaxError):
        return text


def _without(lines, scaffold):
    """``lines`` less one occurrence of each of the release's lines."""
    left = Counter(scaffold)
    kept = []
    for line in lines:
        if left[line]:
            left[line] -= 1
        else:
            kept.append(line)
    return kept
