"""The house by audience (docs/architecture.md): three layers, each importing only those before it, and no import
circle. transformer_course (what students import) knows nothing of the tests' kit or the grader; course_testkit
(the notebooks' test cells and the judges) builds on the package; autograder (the instructor's) on both. Read from
the source, imports inside functions included: an import that is only deferred still ties two modules."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("transformer_course", "course_testkit", "autograder")


def module_name(path, root):
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path, root, modules):
    """The modules of ``modules`` that the file ``path`` imports (`from package import submodule` counts as the
    submodule, not the package's __init__)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            submodules = {f"{source}.{alias.name}" for alias in node.names} & set(modules)
            found |= submodules or {source}
    return {m for m in found if m in modules and m != name}


def import_graph(root=ROOT, layers=LAYERS):
    modules = {module_name(p, root): p for layer in layers for p in (root / layer).rglob("*.py")}
    return {name: imported(path, root, modules) for name, path in modules.items()}


def upward(graph, layers=LAYERS):
    """(module, what it imports from a later layer) for every import against the order."""
    rank = {layer: i for i, layer in enumerate(layers)}
    return [(m, sorted(d for d in deps if rank[d.split(".")[0]] > rank[m.split(".")[0]]))
            for m, deps in sorted(graph.items()) if any(rank[d.split(".")[0]] > rank[m.split(".")[0]] for d in deps)]


def circles(graph):
    """The strongly connected groups of more than one module (Tarjan's algorithm, without recursion)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_each_layer_imports_only_the_ones_before_it():
    assert upward(import_graph()) == []


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_the_checks_find_an_upward_import_and_a_circle(tmp_path):
    for layer, files in {"low": {"a": "from high import b", "c": "from . import d", "d": "from .c import x"},
                         "high": {"b": "import low.c"}}.items():
        (tmp_path / layer).mkdir()
        (tmp_path / layer / "__init__.py").write_text("")
        for name, text in files.items():
            (tmp_path / layer / f"{name}.py").write_text(text)
    graph = import_graph(tmp_path, ("low", "high"))
    assert upward(graph, ("low", "high")) == [("low.a", ["high.b"])]
    assert circles(graph) == [["low.c", "low.d"]]


def test_the_checks_follow_relative_imports_out_of_a_subpackage(tmp_path):
    """``from ..module import x`` and ``from .. import module`` in a subpackage, deferred or not, tie it to the module
    of the package above, so that a circle through a subpackage is found too."""
    for path, text in {"low/__init__.py": "", "low/a.py": "from .sub.b import x", "low/sub/__init__.py": "",
                       "low/sub/b.py": "def x():\n    from ..a import y\n", "low/sub/c.py": "from .. import a"}.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text)
    graph = import_graph(tmp_path, ("low",))
    assert graph["low.sub.b"] == {"low.a"} and graph["low.sub.c"] == {"low.a"} and graph["low.a"] == {"low.sub.b"}
    assert circles(graph) == [["low.a", "low.sub.b"]]


# The grader's subpackages: what runs a submission, and what reads answers' source without running it.
SUBPACKAGES = ("autograder.execution", "autograder.source")


def test_the_graph_holds_every_module_of_the_subpackages():
    """Every module of every layer is in the graph, its subpackages' included, with their imports of each other."""
    graph = import_graph()
    files = {module_name(p, ROOT) for layer in LAYERS for p in (ROOT / layer).rglob("*.py")}
    assert set(graph) == files
    for package in SUBPACKAGES:
        assert [m for m in graph if m.startswith(f"{package}.")], f"no module of {package} in the graph"
    assert "autograder.source.library_answers" in graph["autograder.execution.dispatch"]   # from ..source.X import
    assert "autograder.cells" in graph["autograder.execution.execute"]                      # from ..cells import


# Inside the grader, layers too: the base modules (the registry reader, nbgrader's cell kinds), then source/ (reads
# answers' text), then execution/ (runs submissions, and refuses what source/ flags), then the commands.
GRADER_BASE = ("autograder.registry", "autograder.cells")


def grader_group(module):
    for rank, prefix in enumerate(("autograder.source.", "autograder.execution.")):
        if module.startswith(prefix):
            return rank + 1
    return 0 if module in GRADER_BASE else 3


def grader_upward(graph):
    """(module, what it imports from a later group of the grader) for the base and the subpackages."""
    found = []
    for module, deps in sorted(graph.items()):
        group = grader_group(module) if module.startswith("autograder.") else 3
        against = sorted(d for d in deps if d.startswith("autograder.") and grader_group(d) > group)
        if against:
            found.append((module, against))
    return found


def test_the_graders_subpackages_import_only_the_base_and_the_groups_before_them():
    assert grader_upward(import_graph()) == []


def test_the_grader_check_finds_source_importing_execution():
    graph = {"autograder.source.a": {"autograder.execution.b", "autograder.registry"},
             "autograder.execution.b": {"autograder.source.a", "autograder.grade"}, "autograder.registry": set()}
    assert grader_upward(graph) == [("autograder.execution.b", ["autograder.grade"]),
                                    ("autograder.source.a", ["autograder.execution.b"])]


def test_the_graders_files_named_by_path_are_where_its_modules_look():
    """Modules of autograder/execution/ name files by path or by dotted name in a string: the checkout the sandbox
    hides (an editable install's), the course's nbgrader_config.py, the zygote's source, what the fork server
    preloads."""
    import importlib.util

    import autograder
    from autograder import CONFIG
    from autograder.execution import kernel_server, local_workers, sandbox

    checkout = Path(autograder.__file__).resolve().parents[1]   # the folder that holds the grader's package
    assert sandbox.REPOSITORY == (checkout if (checkout / "pyproject.toml").is_file() else None)
    assert sandbox.COURSE_CONFIG.is_file() and sandbox.COURSE_CONFIG.samefile(CONFIG)
    assert kernel_server.ZYGOTE_SOURCE == (Path(kernel_server.__file__).parent / "kernel_zygote.py").read_text()
    assert all(importlib.util.find_spec(name) for name in local_workers.WORKER_IMPORTS if name.startswith("autograder"))


# ----------------------------------------------------------------------------- one exercise registry

REGISTRY = ROOT / "course_testkit" / "exercises.py"


def registry_names():
    """The assignments and exercises that course_testkit/exercises.py names."""
    from autograder.registry import registry

    notebooks = registry().notebooks
    return set(notebooks) | {e for exercises in notebooks.values() for e in exercises}


def own_lists(path, names):
    """(line, names) of each literal tuple, list, set or dict in ``path`` that holds two or more of ``names``:
    a table of the course's exercises or notebooks kept outside the registry. A module's __all__ (what it
    exports) is no such table."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exported = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)}
    found = []
    for node in ast.walk(tree):
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else \
            [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else []
        held = [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]
        if len(held) >= 2 and id(node) not in exported:
            found.append((node.lineno, held))
    return found


def test_no_module_keeps_its_own_list_of_exercises():
    names = registry_names()
    found = {str(path.relative_to(ROOT)): lists for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))
             if path != REGISTRY and (lists := own_lists(path, names))}
    assert found == {}, f"tables of exercises or notebooks outside {REGISTRY.relative_to(ROOT)}: {found}"
    assert not any(name in (ROOT / "pyproject.toml").read_text() for name in names if name[:2].isdigit())


def test_the_check_finds_a_table_of_exercises(tmp_path):
    (tmp_path / "m.py").write_text('__all__ = ["LayerNorm", "GPT"]\nSLOW = {"07_training": 1, "09_gpt": 2}\n'
                                   'ONE = ("LayerNorm",)\n')
    assert own_lists(tmp_path / "m.py", registry_names()) == [(2, ["07_training", "09_gpt"])]
