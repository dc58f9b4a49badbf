"""The last cell of every notebook: check it as the grader will get it, before handing it in.

``check_this_notebook()`` finds this notebook (on Colab from the Colab runtime, in Jupyter its saved file)
and runs ``python -m autograder check`` on a copy of it (see autograder/check.py), printing the report
into the cell. While the notebook is being graded or checked it does nothing.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def check_this_notebook():
    """Check this notebook as the grader will get it, and print the report."""
    # COURSE_GRADING: set by the course's grader and check; NBGRADER_EXECUTION: by nbgrader's.
    if os.environ.get("COURSE_GRADING") == "1" or os.environ.get("NBGRADER_EXECUTION"):
        print("(the check does not run while the notebook is being graded or checked)")
        return
    notebook, name = _colab_notebook(), None
    if notebook is None:
        name = os.environ.get("JPY_SESSION_NAME") or os.environ.get("__vsc_ipynb_file__")
        if not name or not Path(name).is_file():
            print("Cannot find this notebook's file. Save it, then run in a terminal:\n"
                  "    python -m autograder check PATH/TO/NOTEBOOK.ipynb")
            return
        print(f"Checking {name} as last saved (save first to check your latest changes).")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / (Path(name).name if name else "notebook.ipynb")
        path.write_text(json.dumps(notebook) if notebook is not None else Path(name).read_text(encoding="utf-8"),
                        encoding="utf-8")
        # Line by line into the cell: a child's output would otherwise go to the kernel's terminal.
        with subprocess.Popen([sys.executable, "-m", "autograder", "check", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as child:
            for line in child.stdout:
                print(line, end="")


def _colab_notebook():
    """The notebook as the Colab runtime holds it, or None outside Colab."""
    try:
        from google.colab import _message
    except ImportError:
        return None
    return _message.blocking_request("get_ipynb", timeout_sec=60)["ipynb"]
