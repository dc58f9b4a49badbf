"""Instructor tooling on top of nbgrader: releases, sandboxed parallel grading, feedback (python -m autograder)."""
import sys
from pathlib import Path

# jsonschema (under nbformat) imports rfc3987_syntax if it is installed, only to check "iri" strings, which no
# notebook or nbgrader schema has; the import builds ~35 parsers and costs 1.6 s in every grader process
# (python-jsonschema/jsonschema#1428). Without it, jsonschema leaves that one format unchecked.
sys.modules.setdefault("rfc3987_syntax", None)

CONFIG = Path(__file__).with_name("nbgrader_config.py")
