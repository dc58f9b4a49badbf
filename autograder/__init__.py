"""Instructor tooling on top of nbgrader: releases, sandboxed parallel grading, feedback (python -m autograder)."""
from pathlib import Path

CONFIG = Path(__file__).with_name("nbgrader_config.py")
