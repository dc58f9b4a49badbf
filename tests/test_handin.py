"""The notebooks' last cell, `check_this_notebook()` (course_testkit/handin.py): it finds the notebook's file
where the front end says which it is, takes a path where none does, and otherwise says in one line what to do.

Each case runs in a real kernel (nbclient, as nbconvert runs one), in a folder of its own.
"""
import json

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from course_testkit.handin import NOT_FOUND

pytestmark = [pytest.mark.xdist_group("handin"), pytest.mark.slow]


def printed_by(folder, *sources):
    """What the cells print, run in a fresh kernel whose working folder is `folder`."""
    notebook = new_notebook(cells=[new_code_cell(source) for source in sources])
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    errors = [o for cell in notebook.cells for o in cell.outputs if o.output_type == "error"]
    assert not errors, errors
    return "".join(o.get("text", "") for cell in notebook.cells for o in cell.outputs)


FIND = "from course_testkit.handin import find_notebook_file\nprint('FOUND', find_notebook_file())"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)    # as in VS Code, classic Notebook and nbconvert
    return tmp_path


def notebook_file(path):
    nbformat.write(new_notebook(cells=[new_code_cell("print('hello')")]), path)
    return path


def test_in_vs_code_the_kernel_variable_names_the_file(folder):
    """VS Code sets __vsc_ipynb_file__ in the kernel's namespace, not in its environment."""
    mine = notebook_file(folder / "03_masking.ipynb")
    notebook_file(folder / "another.ipynb")                # two notebooks here: the folder alone cannot tell
    assert f"FOUND {mine}" in printed_by(folder, f"__vsc_ipynb_file__ = {json.dumps(str(mine))}", FIND)


def test_under_nbconvert_the_only_notebook_of_the_folder_is_this_one(folder):
    mine = notebook_file(folder / "03_masking.ipynb")
    assert f"FOUND {mine}" in printed_by(folder, FIND)


def test_where_nothing_says_which_file_it_is_one_line_says_what_to_do(folder):
    notebook_file(folder / "a.ipynb")
    notebook_file(folder / "b.ipynb")
    output = printed_by(folder, "from course_testkit.handin import check_this_notebook\ncheck_this_notebook()")
    assert output.strip() == NOT_FOUND


def test_a_path_given_is_checked(folder):
    """Any notebook, anywhere: here one of no assignment, which the check runs and says it has no release for."""
    (folder / "elsewhere").mkdir()
    other = notebook_file(folder / "elsewhere" / "mine.ipynb")
    output = printed_by(folder, "from course_testkit.handin import check_this_notebook\n"
                                f"check_this_notebook({json.dumps(str(other))})")
    assert f"Checking {other} as last saved" in output and "no release notebook was found" in output, output
    missing = printed_by(folder, "from course_testkit.handin import check_this_notebook\n"
                                 "check_this_notebook('nowhere.ipynb')")
    assert missing.strip() == "No notebook at nowhere.ipynb: give the path of this notebook's file.", missing
