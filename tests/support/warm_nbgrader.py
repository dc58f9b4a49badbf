"""nbgrader's commands for the tests, without paying nbgrader's imports (about 1.5 s) for each of them.

A process that has imported nbgrader forks a child for each command; the child runs it exactly as
``python -m nbgrader <args>`` does (nbgrader's own ``__main__``), in the course's folder, with the process's
environment, and its exit status and output come back. The process ends when its input closes: with the test
worker that started it.
"""
import json
import subprocess
import sys
import tempfile
import threading

ZYGOTE = r'''
import json, os, runpy, sys, traceback
import nbgrader.api, nbgrader.apps.nbgraderapp, nbgrader.converters, nbgrader.preprocessors   # what every command imports
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(request["cwd"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)   # the requests stay this process's to read
            log = os.open(request["log"], os.O_WRONLY | os.O_TRUNC)
            os.dup2(log, 1)
            os.dup2(log, 2)
            sys.argv = ["nbgrader", *request["args"]]
            runpy.run_module("nbgrader", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])), flush=True)
'''


class WarmNbgrader:
    def __init__(self, env):
        self.process = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=env, text=True)
        self.lock = threading.Lock()

    def run(self, args, cwd):
        """Run ``nbgrader <args>`` in ``cwd``; CalledProcessError (with its output) when it fails."""
        with self.lock, tempfile.NamedTemporaryFile("r", suffix=".log") as log:
            self.process.stdin.write(json.dumps({"cwd": str(cwd), "args": list(args), "log": log.name}) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
            if not answer:   # no exit status: CalledProcessError would need one
                raise RuntimeError(f"the process that runs nbgrader's commands died during `nbgrader {' '.join(args)}`:"
                                   f"\n{log.read()}")
            status = json.loads(answer)
            if status != 0:
                raise subprocess.CalledProcessError(status, ["nbgrader", *args], output=log.read())
