"""What runs a submission: its notebooks executed cell by cell in a sandboxed kernel, its judged test cells judged
outside it, on local worker processes or a Dask cluster's.

* ``dispatch.py``: where the executions run (a local pool forked from a preloaded server, or a Dask cluster); one
  submission's notebooks and files go to a worker as bytes, the executed notebooks come back.
* ``local_workers.py``: the local workers' fork server (multiprocessing's "forkserver"), importing what they need once.
* ``execute.py``: one notebook, cell by cell, in a sandboxed kernel within limits on time and output; a cell that
  breaks them costs that cell only.
* ``sandbox.py``: bubblewrap and the resource limits (the kernel's mounts, memory cgroups, its environment).
* ``kernel_server.py``: kernels that start ready, forked from a zygote in the sandbox.
* ``kernel_zygote.py``: that zygote; never imported: its text runs as ``python -I -c``.
* ``stripped.py``: the course package and the tests' kit as a notebook's kernel sees them (without the finished
  answers of that notebook and the later ones).
* ``judging.py``: the judge's half of a judged test cell, run outside the kernel from the cell's source and the
  probe data the kernel sent.
* ``judge_process.py``: the judges in a child process with memory and time limits.
"""
