"""Library answers past the source check (issue 47): a LayerNorm that reaches F.layer_norm by a path the static check
cannot follow gets full marks from the tests (it is right) but is flagged, for a person, because its results on the
secret inputs are bit for bit F.layer_norm's; F.group_norm with one group is refused by the source check."""
import nbformat
import pytest
from support.notebooks import ROOT, SOLUTIONS, with_answers

from autograder.execution.execute import execute_notebook
from autograder.execution.sandbox import Limits, sandbox_available
from autograder.execution.stripped import stripped_package
from autograder.source.library_answers import flagged_answers

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sandbox_available(), reason="bubblewrap (bwrap) is not "
                                                   "installed: apt-get install bubblewrap")]
ASSIGNMENT = "05_layer_norm_feed_forward"
LAYER_NORM = '''
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return {call}
'''
BY_VALUE = {
    "through the package's own import of F": "course.layers.F.layer_norm(x, x.shape[-1:], self.gamma, self.beta, self.eps)",
    "a name built at run time": 'getattr(F, "_".join(["layer", "norm"]))(x, x.shape[-1:], self.gamma, self.beta, self.eps)',
    "nn.LayerNorm's forward, reached through another module's type":
        "type(nn.TransformerEncoderLayer(8, 1).norm1).forward(self._as_module(x), x)",
}


def release():
    return nbformat.read(ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)


def answer(call):
    source = LAYER_NORM.format(call=call)
    if "_as_module" in call:   # nn.LayerNorm.forward reads normalized_shape, weight, bias and eps from its module
        source += ('\n    def _as_module(self, x):\n        return type("N", (), {"normalized_shape": x.shape[-1:], '
                   '"weight": self.gamma, "bias": self.beta, "eps": self.eps})()\n')
    # The source notebook: its test cells hold the hidden tests, as nbgrader restores them before the grader runs
    solution = nbformat.read(SOLUTIONS / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    return with_answers(solution, {"LayerNorm": source})


@pytest.mark.parametrize("why", list(BY_VALUE))
def test_a_layer_norm_reached_by_value_is_flagged_not_failed(why, tmp_path):
    package = stripped_package(ASSIGNMENT, keep_oracles=False)
    executed, problems = execute_notebook(answer(BY_VALUE[why]), tmp_path, Limits(cell_timeout=120), package=package,
                                          env={"COURSE_SMOKE": "1"})
    flags = [p.message for p in problems if p.kind == "flag"]
    assert flags == ["its results on the secret inputs are bit-identical to F.layer_norm's"], (why, problems)
    failed = [c.metadata.get("nbgrader", {}).get("grade_id") for c in executed.cells if c.cell_type == "code"
              and any(o.output_type == "error" for o in c.outputs)]
    assert not failed, (why, failed)


def test_group_norm_with_one_group_is_refused_by_the_source_check():
    call = "F.group_norm(x.reshape(-1, x.shape[-1]), 1, None, None, self.eps).reshape(x.shape) * self.gamma + self.beta"
    assert "LayerNorm" in flagged_answers(answer(call), release())
