"""Source analysis: what the grader reads in answer cells' text, without running anything.

* ``answers.py``: the answers of an exercise (a student's, or a public source's: the package's finished version, the
  course's solutions, the oracles), normalised, and how two of them compare.
* ``normalise.py``: an answer's normalised token lines (comments, docstrings, formatting and the names a student
  chose made canonical), what the similarity report compares.
* ``red_flags.py``: what an answer uses that no exercise needs (frames, hooks, the kernel, threads, code built at
  run time), for a person to look at.
* ``library_answers.py``: answers that are someone else's code (a library's finished version, or a copy of the
  course package's), which score nothing in their exercise's test cells.

The report built on them, ``python -m autograder similarity``, is ``autograder/similarity.py``.
"""
