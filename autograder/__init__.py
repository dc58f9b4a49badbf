"""Instructor tooling on top of nbgrader: releases now, parallel sandboxed grading later."""
from pathlib import Path

CONFIG = Path(__file__).with_name("nbgrader_config.py")
