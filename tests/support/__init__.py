"""What the tests are built from; nothing here is a test.

- ``notebooks``: the solutions, the realistic answers of ``tests/submissions/``, nbgrader's cells, releases filled
  with chosen answers;
- ``courses``: ``ScratchCourse``, a scratch nbgrader course graded with plain nbgrader, and the environment the
  tests grade in (``GRADING_ENV``, the fixed secret ``TEST_SEED``);
- ``warm_nbgrader``: nbgrader's commands forked from a process that imported nbgrader once;
- ``replay``: ``KernelReplay``, many submissions scored with nbgrader's rule in one kernel;
- ``clusters``: a Dask cluster on localhost;
- ``browser``: a Jupyter server and the system's Chromium driven by Playwright;
- ``builders``: a tiny model and a small Multi30k mirror.
"""
