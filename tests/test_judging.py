"""The grader's half of a judged test cell (autograder/execution/judging.py) and the probe data it reads, without a
kernel; the judges draw the hidden inputs from the seed the grader gives them, never from the kernel's data."""
import base64
import io
import pickle
import zipfile

import pytest
import torch
import torch.nn.functional as F

from autograder.execution import judging
from course_testkit import probing

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


SEED = 20261128


def sent(found):
    return base64.b64encode(probing.pack(found)).decode()


def test_the_grader_and_the_kernel_name_the_same_message_and_switch():
    assert judging.PROBE_MIME == probing.PROBE_MIME and judging.JUDGE_OUTSIDE == probing.JUDGE_OUTSIDE


def test_a_judged_cell_is_told_apart_from_a_plain_test_cell():
    assert judging.is_judged(CELL)
    assert not judging.is_judged("assert double(2) == 4")
    assert judging.is_judged("run_test(probe, judge")   # broken, still judged: it fails closed


def test_right_data_passes_and_what_the_judge_printed_is_kept():
    verdict = judging.judge_cell(CELL, [sent({"doubled": torch.arange(4.0) * 2})], SEED)
    assert verdict.passed and verdict.printed == "doubled right\n"


def test_wrong_data_fails_with_the_judges_message():
    verdict = judging.judge_cell(CELL, [sent({"doubled": torch.arange(4.0)})], SEED)
    assert not verdict.passed and verdict.message == "double(x) gave [0.0, 1.0, 2.0, 3.0]"


def test_an_exception_of_the_answer_is_named():
    verdict = judging.judge_cell(CELL, [sent({"doubled": probing.Raised("TypeError", "bad operand\nmore")})], SEED)
    assert verdict.message == "double(x) raised TypeError: bad operand"


def test_missing_or_extra_data_scores_zero():
    assert "stopped before" in judging.judge_cell(CELL, [], SEED).message
    assert "2 results for 1 tests" in judging.judge_cell(CELL, [sent({}), sent({})], SEED).message


def test_a_cell_with_other_statements_fails_closed():
    verdict = judging.judge_cell(CELL + "\nprint('top level')\n", [sent({})], SEED)
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
    verdict = judging.judge_cell(CELL, [base64.b64encode(buffer.getvalue()).decode()], SEED)
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


# A cell whose inputs, in probe and judge alike, come from the secret: the data of a kernel given another secret, or
# recorded from another run, is the answer's on other inputs.
SECRET_CELL = '''
def inputs():
    return torch.randn(5, generator=secret_generator("double"))

def probe():
    return {"doubled": attempt(double, inputs())}

def judge(found):
    doubled = returned(found["doubled"], "double(x)")
    assert torch.equal(doubled, 2 * inputs()), "double(x) is wrong on the hidden inputs"
    print("doubled right")

run_test(probe, judge)
'''


def kernel_sends(seed, answer=lambda x: 2 * x):
    """What a kernel given the secret ``seed`` sends for SECRET_CELL, ``answer`` being the student's double."""
    sent_texts = []
    namespace = {"torch": torch, "attempt": probing.attempt, "secret_generator": probing.secret_generator,
                 "double": answer, "run_test": lambda probe, judge: sent_texts.append(sent(probe()))}
    with probing.judging_with(seed):   # in the kernel, COURSE_TEST_SEED in its environment
        exec(SECRET_CELL, namespace)
    return sent_texts


def test_a_judge_draws_the_inputs_the_kernel_drew_from_the_same_secret():
    verdict = judging.judge_cell(SECRET_CELL, kernel_sends(7), 7)
    assert verdict.passed and verdict.printed == "doubled right\n", verdict.message
    assert not judging.judge_cell(SECRET_CELL, kernel_sends(7, answer=lambda x: 3 * x), 7).passed


@pytest.mark.parametrize("kernel_seed", [8, SEED], ids=["a kernel given another secret", "a payload recorded earlier"])
def test_data_for_other_inputs_fails_however_right_it_was_for_them(kernel_seed):
    recorded = kernel_sends(kernel_seed)
    assert judging.judge_cell(SECRET_CELL, recorded, kernel_seed).passed   # right, for the inputs it was made on
    verdict = judging.judge_cell(SECRET_CELL, recorded, 9)
    assert not verdict.passed and verdict.message == "double(x) is wrong on the hidden inputs"


def test_the_judges_secret_is_theirs_only_while_they_judge():
    before = probing.secret_seed("double")
    with probing.judging_with(7):
        during = probing.secret_seed("double")
    judging.judge_cell(SECRET_CELL, kernel_sends(7), 7)
    assert probing.secret_seed("double") == before != during


# ----------------------------------------------------------------------------- what the kernel is sent

JUDGED = '''
def hidden_inputs():
    return torch.randn(3, generator=secret_generator("t"))


def probe():
    return {"doubled": attempt(double, hidden_inputs())}


def expected(x):
    return x * 2   # SECRET-CHECK


def judge(found):
    """What is checked: SECRET-DOC."""
    assert torch.allclose(found["doubled"], expected(hidden_inputs())), "double(x) should be 2 * x"


run_test(probe, judge)
'''


def test_the_kernel_gets_the_probes_but_not_the_judges():
    sent = judging.kernel_source(JUDGED)
    assert "SECRET" not in sent and "allclose" not in sent
    assert "def hidden_inputs" in sent and 'secret_generator("t")' in sent and "attempt(double" in sent
    assert len(sent.splitlines()) == len(JUDGED.splitlines())    # tracebacks keep their line numbers
    namespace = {"torch": torch, "secret_generator": probing.secret_generator, "attempt": probing.attempt,
                 "double": lambda x: 2 * x, "run_test": lambda probe, judge: judge(probe())}
    exec(compile(sent, "<kernel>", "exec"), namespace)       # runs: the judge is a stub that checks nothing
    assert judging.kernel_source("def broken(:\n") == "def broken(:\n"    # fails in the kernel, closed


def test_the_judges_of_the_full_source_decide():
    with probing.judging_with(5):
        right = probing.pack({"doubled": torch.randn(3, generator=probing.secret_generator("t")) * 2})
    verdict = judging.judge_cell(JUDGED, [base64.b64encode(right).decode()], 5)
    assert verdict.passed, verdict.message
    assert not judging.judge_cell(JUDGED, [base64.b64encode(right).decode()], 6).passed


def test_a_result_bit_for_bit_the_librarys_is_flagged_for_a_person_not_failed():
    cell = ('def probe():\n    return {}\n\n\ndef judge(found):\n'
            '    from course_testkit.probing import flag_if_same\n'
            '    x = torch.randn(4, 6, generator=secret_generator("x"))\n'
            '    flag_if_same(found["out"], F.layer_norm(x, (6,)), "F.layer_norm")\n\n\nrun_test(probe, judge)\n')
    with probing.judging_with(3):
        x = torch.randn(4, 6, generator=probing.secret_generator("x"))
    by_library = F.layer_norm(x, (6,))
    by_hand = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    assert torch.allclose(by_hand, by_library, atol=1e-5)
    verdicts = [judging.judge_cell(cell, [base64.b64encode(probing.pack({"out": out})).decode()], 3)
                for out in (by_library, by_hand)]
    assert all(v.passed for v in verdicts)
    assert verdicts[0].flags == ["its results on the secret inputs are bit-identical to F.layer_norm's"]
    assert verdicts[1].flags == []


# ----------------------------------------------------------------------------- what a judge never reads

def test_probe_data_that_would_swell_in_the_judge_is_refused_unread():
    import struct

    def saved(value):
        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()

    with pytest.raises(probing.ProbeDataError, match="not dense"):
        probing.unpack(saved(torch.zeros(1).expand(2**22, 2**22)))         # 4 bytes standing for 64 TB
    shared = [0]
    for _ in range(30):
        shared = [shared, shared]                                           # 1.5 kB, 2**30 values once copied
    with pytest.raises(probing.ProbeDataError, match="values"):
        probing.unpack(saved(shared))
    data = bytearray(saved({"a": torch.randn(10)}))
    first = zipfile.ZipFile(io.BytesIO(bytes(data))).infolist()[0].header_offset
    directory = data.rfind(b"PK\x01\x02")
    data[directory + 42:directory + 46] = struct.pack("<I", first)         # two records over one block
    with pytest.raises(probing.ProbeDataError, match="overlapping"):
        probing.unpack(bytes(data))
    assert probing.unpack(saved(torch.ones(1, 1, 0, 0).bool())).shape == (1, 1, 0, 0)   # empty is fine


def test_an_exception_reaches_a_page_only_in_a_short_checked_form():
    raised = probing.Raised("ValueErrorCarrying" + "x" * 60, "line one\x1b[31m\n" + "y" * 500)
    assert raised.type_name == "Exception" and raised.first_line == "line one?[31m"
    assert len(raised.message) <= probing.MAX_MESSAGE
