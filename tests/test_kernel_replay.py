"""Which cells ``support.replay.KernelReplay`` re-runs for a submission: nbgrader's cells, and the demonstrations that bind
or change a name a later one of them reads, directly or through another demonstration that is re-run."""
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from support.notebooks import nbgrader_cell
from support.replay import KernelReplay


def replayed(*cells):
    """The replay's re-run cells of a notebook of `cells`, by their first line."""
    notebook = new_notebook(cells=[nbgrader_cell("import math", "setup"), *cells,
                                   nbgrader_cell("assert f(2) == 4", "test_f", grade=True, points=1)])
    replay = KernelReplay(notebook, ".")
    return [notebook.cells[i].source.splitlines()[0] for i in sorted(replay.replayed)]


def answer(source="def f(x):\n    return x * scale"):
    return nbgrader_cell(source, "f", solution=True)


def test_a_demonstration_that_binds_nothing_read_later_is_not_re_run():
    assert replayed(answer(), new_code_cell("print(f(3))"), new_code_cell("shown = [f(i) for i in range(4)]")) == \
        ["import math", "def f(x):", "assert f(2) == 4"]


def test_a_demonstration_whose_name_a_test_or_a_kept_demonstration_reads_is_re_run():
    test_reads = nbgrader_cell("def probe():\n    return f(base)\nassert probe() == 4", "test_g", grade=True, points=1)
    assert replayed(answer(), new_code_cell("base = 2"), new_code_cell("base_of_base = base"), test_reads) == \
        ["import math", "def f(x):", "base = 2", "def probe():", "assert f(2) == 4"]
    kept_for_a_kept_one = [new_code_cell("scale = 2"), new_code_cell("unused = 1"), new_markdown_cell("scale it"),
                           new_code_cell("def helper():\n    return scale"), answer("def f(x):\n    return x * helper()")]
    assert replayed(*kept_for_a_kept_one) == ["import math", "scale = 2", "def helper():", "def f(x):",
                                              "assert f(2) == 4"]


def test_a_demonstration_that_changes_an_object_a_test_reads_is_re_run_a_call_on_a_module_is_not():
    test_reads = nbgrader_cell("assert f(table[0]) == 4", "test_g", grade=True, points=1)
    changes = [new_code_cell("table.append(2)"), new_code_cell("table[0] = 2"), new_code_cell("table.size = 1")]
    assert replayed(answer(), *changes, new_code_cell("math.sqrt(2)"), test_reads) == \
        ["import math", "def f(x):", "table.append(2)", "table[0] = 2", "table.size = 1", "assert f(table[0]) == 4",
         "assert f(2) == 4"]


def test_before_a_cell_that_cannot_be_read_every_cell_is_re_run():
    for unreadable in ("%time shown = f(3)", "from math import *", "!ls"):
        assert replayed(new_code_cell("before = 1"), answer(), new_code_cell(unreadable)) == \
            ["import math", "before = 1", "def f(x):", unreadable, "assert f(2) == 4"]


def test_a_read_only_cell_of_nbgrader_is_re_run_whatever_it_binds():
    assert "shown = 3" in replayed(answer(), nbgrader_cell("shown = 3", "shown"))
