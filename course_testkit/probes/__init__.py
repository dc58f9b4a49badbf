"""What the hidden tests' probes call, one module per notebook: run in the grading kernel, so nothing here
knows an expected value. The judges (in course_testkit.oracles) rebuild the same inputs from the same seeds."""
