"""`torch.compile` of the course's models works in any process: importing the package and its test kit (testing,
probing, the oracles) changes none of the package's code, so dynamo traces it as written. Run in a fresh
interpreter, as a student's or a training script's would be."""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow   # a fresh interpreter that compiles: `-m 'not slow'` leaves it out

SCRIPT = textwrap.dedent("""
    import copy
    import torch
    import transformer_course
    import course_testkit.oracles, course_testkit.probing, course_testkit.testing   # the test kit

    graphs = []

    def backend(graph, inputs):   # aot_eager traces forward and backward; counting says dynamo got here
        graphs.append(graph)
        from torch._dynamo.backends.debugging import aot_eager
        return aot_eager(graph, inputs)

    def loss_of(logits, targets):
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)

    def compare(name, model, call):
        eager, compiled, losses = copy.deepcopy(model), torch.compile(model, backend=backend), []
        for module, run in ((eager, eager), (model, compiled)):
            optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
            loss = call(run)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) < 1e-5, (name, losses)
        for (parameter, a), b in zip(eager.named_parameters(), model.parameters()):
            assert torch.allclose(a, b, atol=1e-5), f"{name}: {parameter} differs after the step"
        print(name, losses)

    torch.manual_seed(0)
    src = torch.tensor([[5, 6, 7, 2, 0], [8, 9, 2, 0, 0]])
    tgt = torch.tensor([[1, 10, 11, 12, 2], [1, 13, 2, 0, 0]])
    transformer = transformer_course.Transformer(17, 19, d_model=16, n_heads=2, num_encoder_layers=1,
                                                 num_decoder_layers=1, d_ff=32, dropout=0.0)
    compare("Transformer", transformer, lambda run: loss_of(run(src, tgt[:, :-1]), tgt[:, 1:]))
    gpt = transformer_course.GPT(19, d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0)
    compare("GPT", gpt, lambda run: loss_of(run(tgt[:, :-1]), tgt[:, 1:]))
    assert graphs, "dynamo compiled no graph"
    print("OK", len(graphs))
""")


def test_the_course_models_compile_and_train_like_the_eager_ones():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "OK" in result.stdout, f"{result.stdout}\n{result.stderr[-3000:]}"
