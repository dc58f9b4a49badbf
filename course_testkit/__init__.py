"""The tests' kit: what the notebooks' test cells and the grader's judges use, kept out of the package students
import (transformer_course), which it builds on.

* ``exercises``: the exercise registry, what the course knows about each notebook's exercises, written once;
* ``probing``: the probe/judge protocol, with the secret inputs of the hidden tests;
* ``probes/``: what a probe sends from the student's kernel, one module per notebook;
* ``oracles/``: the judges' independent oracles, one module per notebook (never in a grading kernel);
* ``testing``: the visible tests' checks, which explain themselves;
* ``handin``: the notebooks' last cell, ``check_this_notebook()``.
"""
