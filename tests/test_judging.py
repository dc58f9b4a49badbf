"""The grader's half of a judged test cell (autograder/judging.py) and the probe data it reads, without a kernel."""
import base64
import io
import pickle
import zipfile

import pytest
import torch

from autograder import judging
from transformer_course import probing

CELL = '''
def inputs():
    return torch.arange(4.0)

def probe():
    return {"doubled": attempt(double, inputs())}

def judge(found):
    doubled = returned(found["doubled"], "double(x)")
    assert torch.equal(doubled, 2 * inputs()), f"double(x) gave {doubled.tolist()}"
    print("doubled right")

run_test(probe, judge)
'''


def sent(found):
    return base64.b64encode(probing.pack(found)).decode()


def test_the_grader_and_the_kernel_name_the_same_message_and_switch():
    assert judging.PROBE_MIME == probing.PROBE_MIME and judging.JUDGE_OUTSIDE == probing.JUDGE_OUTSIDE


def test_a_judged_cell_is_told_apart_from_a_plain_test_cell():
    assert judging.is_judged(CELL)
    assert not judging.is_judged("assert double(2) == 4")
    assert judging.is_judged("run_test(probe, judge")   # broken, still judged: it fails closed


def test_right_data_passes_and_what_the_judge_printed_is_kept():
    verdict = judging.judge_cell(CELL, [sent({"doubled": torch.arange(4.0) * 2})])
    assert verdict.passed and verdict.printed == "doubled right\n"


def test_wrong_data_fails_with_the_judges_message():
    verdict = judging.judge_cell(CELL, [sent({"doubled": torch.arange(4.0)})])
    assert not verdict.passed and verdict.message == "double(x) gave [0.0, 1.0, 2.0, 3.0]"


def test_an_exception_of_the_answer_is_named():
    verdict = judging.judge_cell(CELL, [sent({"doubled": probing.Raised("TypeError", "bad operand\nmore")})])
    assert verdict.message == "double(x) raised TypeError: bad operand"


def test_missing_or_extra_data_scores_zero():
    assert "stopped before" in judging.judge_cell(CELL, []).message
    assert "2 results for 1 tests" in judging.judge_cell(CELL, [sent({}), sent({})]).message


def test_a_cell_with_other_statements_fails_closed():
    verdict = judging.judge_cell(CELL + "\nprint('top level')\n", [sent({})])
    assert not verdict.passed and "may hold only imports, definitions" in verdict.message


def test_a_pickled_object_is_never_loaded(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickle.dumps(Evil(), protocol=2))
        archive.writestr("archive/version", "3\n")
    verdict = judging.judge_cell(CELL, [base64.b64encode(buffer.getvalue()).decode()])
    assert not verdict.passed and "could not be read" in verdict.message and not marker.exists()


@pytest.mark.parametrize("data, why", [(b"x" * (probing.MAX_BYTES + 1), "more than"), (b"not a zip", "not torch.save"),
                                       (None, "compressed")])
def test_oversized_foreign_or_compressed_data_is_refused(data, why):
    if data is None:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("archive/data.pkl", b"\0" * 1000)
        data = buffer.getvalue()
    with pytest.raises(probing.ProbeDataError, match=why):
        probing.unpack(data)


def test_probe_data_comes_back_as_plain_data():
    class Sub(torch.Tensor):
        pass
    found = {"t": torch.ones(2).as_subclass(Sub), "pair": (1, "a"), "none": None, "error": probing.Raised("E", "m"),
             "size": torch.Size([2, 3]), "object": object()}
    back = probing.unpack(probing.pack(found))
    assert type(back["t"]) is torch.Tensor and back["pair"] == (1, "a") and back["none"] is None
    assert isinstance(back["error"], probing.Raised) and back["size"] == [2, 3]
    assert back["object"] == {"__unsupported__": "object"}


def test_replayed_calls_return_what_the_probe_recorded():
    x = torch.arange(3.0)
    recorded = probing.unpack(probing.pack(probing.record_calls(lambda t, k=1: t * k, [((x,), {}), ((x,), {"k": 2})])))
    answer = probing.replayed(recorded, "f")
    assert torch.equal(answer(x.clone(), k=2), 2 * x) and torch.equal(answer(x), x)
    with pytest.raises(AssertionError, match="the probe did not make this call"):
        answer(x + 1)
    failing = probing.replayed(probing.record_calls(lambda t: t.view(7), [((x,), {})]), "f")
    with pytest.raises(RuntimeError):
        failing(x)
