# nbgrader configuration of the course. The release tool (python -m autograder release) uses it, and an
# instructor copies it into their own course directory (see docs/instructors.md).
try:
    # nbgrader runs `alembic` from PATH; importing the course's tools puts the environment's scripts on PATH, so
    # that `venv/bin/nbgrader ...` works without activating the environment (autograder.tools_on_path).
    import autograder  # noqa: F401
except ImportError:
    pass

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "transformer-course"

# What a student sees in place of a solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Seconds a cell may run while grading, stated here only: plain `nbgrader autograde` reads it, and so do
# `python -m autograder grade` (its --cell-timeout default, read from the course directory's copy of this file) and a
# student's `python -m autograder check` (from the course package's). Keep it a number. Notebook 07 trains a small
# model, which takes minutes on a CPU at full length (plain nbgrader, `grade --full-training`), hence the generous
# limit. nbgrader always runs on past errors, so one broken exercise costs only its own tests.
c.Execute.timeout = 600
# At a notebook's end nbgrader asks its kernel to exit and waits for it (2-3 s with torch loaded): a grading kernel has
# nothing to finish, so it is stopped at once.
c.Execute.shutdown_kernel = "immediate"

# Collecting submissions from an LMS (`nbgrader zip_collect ASSIGNMENT`): the course's collector reads the file
# names of Canvas's and Moodle's "download all submissions" zips, late and re-uploaded ones included (see
# docs/instructors.md, step 3, and autograder/collect.py).
c.ZipCollectApp.collector_plugin = "autograder.collect.LMSCollector"

# The formgrader typesets the maths of written answers with MathJax from the Jupyter server itself (the
# jupyter-server-mathjax package) rather than from nbconvert's CDN, so that grading by hand works offline: the
# course's template folder goes before nbgrader's (autograder/templates/formgrade/mathjax.html.j2).
try:
    import os as _os

    import nbgrader as _nbgrader

    c.HTMLExporter.extra_template_basedirs = [
        _os.path.join(_os.path.dirname(autograder.__file__), "templates"),
        _os.path.join(_os.path.dirname(_nbgrader.__file__), "server_extensions", "formgrader", "templates")]
except (ImportError, NameError):
    pass
