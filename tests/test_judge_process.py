"""The judges in a child process with limits (autograder/execution/judge_process.py): a judge that hangs or swells
fails its own cell with a reason, and the next cell gets a new judge."""
import base64

from autograder.execution.judge_process import JudgeProcess
from course_testkit import probing

CELL = '''
def probe():
    return {"x": 1}


def judge(found):
    if found["x"] == "hang":
        while True:
            pass
    if found["x"] == "swell":
        kept = [bytearray(10**8) for _ in range(40)]
    assert found["x"] == 1, "x should be 1"
    print("checked")


run_test(probe, judge)
'''


def sent(x):
    return [base64.b64encode(probing.pack({"x": x})).decode()]


def test_a_judge_that_hangs_or_swells_fails_its_cell_and_the_next_is_judged():
    judges = JudgeProcess(seconds=2, memory_mb=400)
    try:
        assert judges.judge(CELL, sent(1), 1).printed == "checked\n"
        assert judges.judge(CELL, sent(0), 1).message == "x should be 1"
        hung = judges.judge(CELL, sent("hang"), 1)
        assert not hung.passed and "more than 2 s" in hung.message
        swollen = judges.judge(CELL, sent("swell"), 1)
        assert not swollen.passed and "memory" in swollen.message
        assert judges.judge(CELL, sent(1), 1).passed     # a new child, after the one that hung was stopped
    finally:
        judges.close()
    assert judges.pid is None


def test_a_process_imports_the_judges_modules_before_its_first_child_so_later_children_find_them():
    """Where no fork server imported them ahead (an instructor's own assignment), each notebook's child would import
    torch and the oracles again: the process that forks the children imports them once, before the first."""
    import subprocess
    import sys

    script = ("import sys\nfrom autograder.execution.judge_process import JUDGES_IMPORTS, JudgeProcess\n"
              "before = [m for m in JUDGES_IMPORTS if m in sys.modules]\njudges = JudgeProcess()\n"
              "judges.judge('assert True', [], 1)\njudges.close()\n"
              "print(before, [m for m in JUDGES_IMPORTS if m not in sys.modules])")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "[] []", done.stdout + done.stderr
