"""The notebooks as plain Python (docs/development.md, "Notebooks as text"): jupytext's percent scripts keep every
cell, its source and nbgrader's metadata, so that `git diff` can show them as text and a notebook can be edited as a
script and written back (`jupytext --to ipynb --update`) without losing what nbgrader grades by."""
import subprocess
import sys

import jupytext
import nbformat
import pytest
from jupytext.combine import combine_inputs_with_outputs
from support.notebooks import SOLUTIONS

NOTEBOOKS = sorted(SOLUTIONS.glob("*/*.ipynb"))   # the releases are made from them, cell by cell


def as_script(notebook):
    return jupytext.writes(notebook, fmt="py:percent")


def cells(notebook):
    """Each cell's type, source and nbgrader metadata; a newline at the very end of a source is not kept by the
    percent format (it ends every cell with one) and means nothing to Python or Markdown."""
    return [(cell.cell_type, cell.source.removesuffix("\n"), cell.metadata.get("nbgrader")) for cell in notebook.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_read_back_from_its_script_has_the_same_cells(path):
    notebook = nbformat.read(path, as_version=4)
    back = jupytext.reads(as_script(notebook), fmt="py:percent")
    assert cells(back) == cells(notebook), f"{path.name}: a cell changed in the round trip through py:percent"


def test_a_script_written_back_with_update_keeps_ids_and_metadata():
    path = SOLUTIONS / "03_masking" / "03_masking.ipynb"
    notebook = nbformat.read(path, as_version=4)
    edited = as_script(notebook).replace("def padding_mask(", "def padding_mask(  ", 1)
    updated = combine_inputs_with_outputs(jupytext.reads(edited, fmt="py:percent"), notebook, fmt="py:percent")
    changed = [i for i, (a, b) in enumerate(zip(notebook.cells, updated.cells)) if a.source != b.source]
    assert len(changed) == 1, changed
    assert [c.get("id") for c in updated.cells] == [c.get("id") for c in notebook.cells]
    assert [c.metadata for c in updated.cells] == [c.metadata for c in notebook.cells]


def test_the_diff_driver_command_prints_the_script():
    path = SOLUTIONS / "03_masking" / "03_masking.ipynb"
    shown = subprocess.run([sys.executable, "-m", "jupytext", "--to", "py:percent", "--output", "-", str(path)],
                           capture_output=True, text=True, check=True).stdout
    assert "def padding_mask(" in shown and '"grade_id": "padding_mask"' in shown.replace("'", '"'), shown[:500]
