"""The hidden tests' oracles, one module per notebook, defined once and shared by every test cell and by tests/.

A hidden test cell imports its notebook's module inside the test function (so no name the student defines can
stand in for it) and passes the student's answer in: an oracle never reads the notebook's names.

An oracle that computes an exercise's answer would be a route to a finished answer, so each module lists those
in ``ANSWER_HELPERS`` (exercise -> functions); own_work gates them as helpers of that exercise: during its tests
they refuse a call from anything but the package's own checks.
"""
from . import attention, decoding, gpt, layer_norm, masking, multi_head, training, transformer

ANSWER_HELPERS = {}
for _module in (attention, masking, multi_head, layer_norm, transformer, training, decoding, gpt):
    for _exercise, _helpers in _module.ANSWER_HELPERS.items():
        ANSWER_HELPERS[_exercise] = ANSWER_HELPERS.get(_exercise, ()) + _helpers

# Registered here, not imported by own_work: a copy of the package without oracles/ still imports.
from ..own_work import add_answer_helpers  # noqa: E402

add_answer_helpers(ANSWER_HELPERS)
