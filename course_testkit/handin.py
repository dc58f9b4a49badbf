"""The last cell of every notebook: check it as the grader will get it, before handing it in.

``check_this_notebook()`` finds this notebook and runs ``python -m autograder check`` on a copy of it (see
autograder/check.py), printing the report into the cell. Where the notebook comes from:

* the path given, ``check_this_notebook("03_masking.ipynb")``: works everywhere;
* on Colab, the Colab runtime (the notebook as it is now, unsaved changes included);
* in VS Code, the kernel variable ``__vsc_ipynb_file__`` that VS Code sets;
* in JupyterLab and Notebook 7, the ``JPY_SESSION_NAME`` environment variable of the kernel;
* in classic Notebook (and older JupyterLab), the running Jupyter server's list of sessions, which says which
  notebook this kernel belongs to;
* otherwise (nbconvert, papermill), the only notebook of the working folder, which is the notebook's own.

Outside Colab the check reads the saved file, so save first. While the notebook is being graded or checked it
does nothing.
"""
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

NOT_FOUND = ("Cannot find this notebook's file here: save it, then call check_this_notebook(\"PATH/TO/NOTEBOOK.ipynb\") "
             "or run `python -m autograder check PATH/TO/NOTEBOOK.ipynb` in a terminal.")


def check_this_notebook(path=None, verbose=False):
    """Check this notebook (or the one at ``path``) as the grader will get it, and print the report.
    ``verbose``: list every repair of the notebook's grading metadata (by default, one line says there were)."""
    # COURSE_GRADING: set by the course's grader and check; NBGRADER_EXECUTION: by nbgrader's.
    if os.environ.get("COURSE_GRADING") == "1" or os.environ.get("NBGRADER_EXECUTION"):
        print("(the check does not run while the notebook is being graded or checked)")
        return
    notebook = _colab_notebook() if path is None else None
    name = None
    if notebook is None:
        name = Path(path).expanduser() if path is not None else find_notebook_file()
        if name is None or not name.is_file():
            print(NOT_FOUND if name is None else f"No notebook at {name}: give the path of this notebook's file.")
            return
        print(f"Checking {name} as last saved (save first to check your latest changes).")
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / (name.name if name else "notebook.ipynb")
        copy.write_text(json.dumps(notebook) if notebook is not None else name.read_text(encoding="utf-8"),
                        encoding="utf-8")
        command = [sys.executable, "-m", "autograder", "check", str(copy), *(["--verbose"] if verbose else [])]
        # Line by line into the cell: a child's output would otherwise go to the kernel's terminal.
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as child:
            for line in child.stdout:
                print(line, end="")


def find_notebook_file():
    """This kernel's notebook file, where the front end says which it is (see the module's docstring), else None."""
    for finder in (_vscode_file, _session_name, _server_session, _only_notebook_here):
        try:
            found = finder()
        except Exception:  # a front end's private ways change: a finder that fails finds nothing
            found = None
        if found is not None and Path(found).is_file():
            return Path(found)
    return None


def _colab_notebook():
    """The notebook as the Colab runtime holds it, or None outside Colab."""
    try:
        from google.colab import _message
    except ImportError:
        return None
    return _message.blocking_request("get_ipynb", timeout_sec=60)["ipynb"]


def _vscode_file():
    """VS Code sets ``__vsc_ipynb_file__`` in the kernel's namespace (not in its environment)."""
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns.get("__vsc_ipynb_file__") if shell is not None else None


def _session_name():
    """Jupyter Server 2 (JupyterLab 4, Notebook 7) starts a notebook's kernel with its path in JPY_SESSION_NAME."""
    return os.environ.get("JPY_SESSION_NAME")


def _server_session():
    """The notebook whose session holds this kernel, from the running Jupyter servers' REST API (classic
    Notebook, older JupyterLab)."""
    from ipykernel.connect import get_connection_file

    kernel = Path(get_connection_file()).stem.removeprefix("kernel-")
    for server in _running_servers():
        url = f"{server['url'].rstrip('/')}/api/sessions?token={server.get('token', '')}"
        with urllib.request.urlopen(url, timeout=2) as response:
            sessions = json.load(response)
        for session in sessions:
            if session.get("kernel", {}).get("id") == kernel:
                relative = session.get("path") or session.get("notebook", {}).get("path")
                return Path(server.get("root_dir") or server.get("notebook_dir") or ".") / relative
    return None


def _running_servers():
    servers = []
    for module in ("jupyter_server.serverapp", "notebook.notebookapp"):
        try:
            servers += list(__import__(module, fromlist=["list_running_servers"]).list_running_servers())
        except ImportError:
            pass
    return servers


def _only_notebook_here():
    """nbconvert and papermill run a notebook's kernel in the notebook's folder: its only notebook is this one."""
    notebooks = [p for p in Path.cwd().glob("*.ipynb") if not p.name.startswith(".")]
    return notebooks[0] if len(notebooks) == 1 else None
