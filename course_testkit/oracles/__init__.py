"""The hidden tests' oracles, one module per notebook, defined once and shared by every test cell and by tests/.

A hidden test's judge imports its notebook's module and computes what the answer must return from the test's
inputs: an oracle never reads the notebook's names. The oracles are not in the grading kernel
(autograder/execution/stripped.py leaves them out): the judges run in the grader's own process.
"""
