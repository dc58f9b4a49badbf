"""The code stays readable at once: no function or method longer than MAX_LINES lines (its `def` line to
its last line, docstring included) in the packages listed in CHECKED_DIRECTORIES, and nothing ruff reports
with the rules pyproject.toml selects."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 60
CHECKED_DIRECTORIES = ["transformer_course", "course_testkit", "autograder", "benchmarks", "tests", "data"]


def long_functions(directory, root=ROOT, max_lines=MAX_LINES):
    """(path:line, qualified name, length) of every function under root/directory longer than `max_lines`."""
    found = []
    for path in sorted((root / directory).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += _long_in(tree, path.relative_to(root), "", max_lines)
    return found


def _long_in(node, path, prefix, max_lines):
    found = []
    for child in ast.iter_child_nodes(node):
        name = f"{prefix}{getattr(child, 'name', '')}"
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = child.end_lineno - child.lineno + 1
            if length > max_lines:
                found.append((f"{path}:{child.lineno}", name, length))
        nested = f"{name}." if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else prefix
        found += _long_in(child, path, nested, max_lines)
    return found


def test_the_checker_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(f"class C:\n    def short(self):\n        pass\n\n"
                                           f"    def long(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n")
    assert [(name, length) for _, name, length in long_functions("pkg", tmp_path)] == [("C.long", MAX_LINES + 1)]


def test_no_function_is_longer_than_max_lines():
    found = [entry for directory in CHECKED_DIRECTORIES for entry in long_functions(directory)]
    assert not found, (f"functions longer than {MAX_LINES} lines (split them into steps with names): "
                       + "; ".join(f"{where} {name} ({length} lines)" for where, name, length in found))


def test_ruff_reports_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"ruff (its rules are in pyproject.toml) reports:\n{result.stdout}{result.stderr}"
