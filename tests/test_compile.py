"""`torch.compile` of the course's Transformer: importing the package rewrites none of its code.

own_work gates the finished answers by replacing their code, which dynamo cannot trace ("Cannot construct
ConstantVariable for value of type function" at padding_mask). The gates go up only at the first test
cell's require_own_work, so ordinary use compiles. Run in a fresh interpreter: in this one, other tests
have put the gates up already.
"""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow   # a fresh interpreter that compiles: `-m 'not slow'` leaves it out

SCRIPT = textwrap.dedent("""
    import copy
    import torch
    import transformer_course
    from transformer_course import own_work

    torch.manual_seed(0)
    model = transformer_course.Transformer(17, 19, d_model=16, n_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                           d_ff=32, dropout=0.0)
    eager = copy.deepcopy(model)
    graphs = []

    def backend(graph, inputs):   # aot_eager traces forward and backward; counting says dynamo got here
        graphs.append(graph)
        from torch._dynamo.backends.debugging import aot_eager
        return aot_eager(graph, inputs)

    compiled = torch.compile(model, backend=backend)
    src = torch.tensor([[5, 6, 7, 2, 0], [8, 9, 2, 0, 0]])
    tgt = torch.tensor([[1, 10, 11, 12, 2], [1, 13, 2, 0, 0]])
    losses = []
    for module, run in ((eager, eager), (model, compiled)):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        logits = run(src, tgt[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert graphs, "dynamo compiled no graph"
    assert abs(losses[0] - losses[1]) < 1e-5, losses
    for (name, a), b in zip(eager.named_parameters(), model.parameters()):
        assert torch.allclose(a, b, atol=1e-5), f"{name} differs after the step"
    assert not own_work._ORIGINAL_CODE, "importing the package gated functions"
    print("OK", losses, len(graphs))
""")


def test_the_course_transformer_compiles_and_trains_like_the_eager_one():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "OK" in result.stdout, f"{result.stdout}\n{result.stderr[-3000:]}"
