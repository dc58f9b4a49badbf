"""The names the kernel's probes and the grader's judges share, torch-free: the grader reads them without
importing torch (autograder/execution/judging.py), the kernel's side through probing.py."""

PROBE_MIME = "application/vnd.transformer-course.probe+base64"   # the output a probe's data travels in
JUDGE_OUTSIDE = "COURSE_JUDGE_OUTSIDE"   # set by the grader in the kernel's environment: the judges run outside
SEED_VARIABLE = "COURSE_TEST_SEED"       # the secret of the hidden tests' inputs, in the kernel's environment
