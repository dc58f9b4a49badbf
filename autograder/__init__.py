"""Instructor tooling on top of nbgrader: releases, sandboxed parallel grading, feedback (python -m autograder).

The commands are the modules at this level, one each, with the course directory's helpers; ``execution/`` is what
runs a submission (workers, sandbox, kernels, judges), ``source/`` what reads answers' source without running it.
"""
import os
import sys
from pathlib import Path

# jsonschema (under nbformat) imports rfc3987_syntax if it is installed and rfc3987 is not, only to check "iri"
# strings, which no notebook or nbgrader schema has; the import builds ~35 parsers and costs 1.6-2.5 s in every
# process (python-jsonschema/jsonschema#1428). Without it, jsonschema leaves that one format unchecked. The `dev`
# extra installs rfc3987, which also spares plain `nbgrader` commands; this line covers the course's commands where
# the extra is absent: a student's `python -m autograder check` on Colab, say.
sys.modules.setdefault("rfc3987_syntax", None)

CONFIG = Path(__file__).with_name("nbgrader_config.py")


def tools_on_path(environ=os.environ):
    """Put the folder of this Python's scripts first on PATH, unless it is there already.

    nbgrader runs `alembic` from PATH when it creates a gradebook, so `venv/bin/python -m autograder ...` or
    `venv/bin/nbgrader ...` from a virtual environment that is not activated would fail (FileNotFoundError:
    'alembic') or, in `nbgrader generate_assignment`, release nothing. The course's commands, and every
    process they start, find the environment's tools without activation."""
    scripts = str(Path(sys.executable).parent)
    folders = environ.get("PATH", "").split(os.pathsep)
    if scripts not in folders:
        environ["PATH"] = os.pathsep.join([scripts, *filter(None, folders)])


tools_on_path()
