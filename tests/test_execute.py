"""autograder/execution/execute.py's own logic, without a kernel: a message the grader cannot read (a bad signature,
as a process flood made jupyter_client raise "Invalid Signature") fails the cell as a dead kernel does, so that the
grader starts a new kernel and grades the rest, instead of failing the whole submission."""
from queue import Empty

from autograder.execution import execute


class FakeProcess:
    def __init__(self):
        self.killed = False

    def poll(self):
        return 0 if self.killed else None

    def kill(self):
        self.killed = True


class UnreadableClient:
    def get_iopub_msg(self, timeout):
        raise ValueError("Invalid Signature: b'...'")

    def get_shell_msg(self, timeout):
        raise Empty


def test_an_unreadable_message_kills_the_kernel_and_fails_the_cell_as_a_death():
    kernel = execute._Kernel.__new__(execute._Kernel)
    kernel.process, kernel.client, kernel.pending = FakeProcess(), UnreadableClient(), None
    assert kernel._wait("request", until=float("inf")) == "died"
    assert kernel.process.killed and not kernel.usable


def test_next_tells_nothing_from_unreadable():
    assert execute._next(UnreadableClient().get_shell_msg, 0) is None
    assert execute._next(UnreadableClient().get_iopub_msg, 0) is execute.UNREADABLE
