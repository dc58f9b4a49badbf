"""tests/support/warm_nbgrader.py runs an nbgrader command as ``python -m nbgrader`` does: in the folder given, with its exit
status, and its output when it fails."""
import subprocess

import nbformat
import pytest
from nbformat.v4 import new_notebook
from support.courses import GRADING_ENV
from support.notebooks import nbgrader_cell
from support.warm_nbgrader import WarmNbgrader

pytestmark = pytest.mark.slow   # nbgrader's commands


def test_a_command_runs_in_the_folder_given_and_a_failure_comes_back_with_its_output(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.course_id = 'demo'\n")
    source = tmp_path / "source" / "ps" / "ps.ipynb"
    source.parent.mkdir(parents=True)
    nbformat.write(new_notebook(cells=[nbgrader_cell("x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION", "answer",
                                                     solution=True)]), source)
    nbgrader = WarmNbgrader(GRADING_ENV)
    nbgrader.run(["generate_assignment", "ps", "--log-level=ERROR"], tmp_path)
    released = nbformat.read(tmp_path / "release" / "ps" / "ps.ipynb", as_version=4)
    assert "y = 2" not in released.cells[0].source and "x = 1" in released.cells[0].source
    with pytest.raises(subprocess.CalledProcessError) as failed:
        nbgrader.run(["generate_assignment", "nosuch"], tmp_path)
    assert failed.value.returncode == 1 and "No notebooks were matched" in failed.value.output, failed.value.output
    nbgrader.run(["generate_assignment", "ps", "--force", "--log-level=ERROR"], tmp_path)   # still there after a failure
