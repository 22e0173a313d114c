"""Test-wide settings: runs the suite starts use no solution memory unless a test names one
(the user's ~/.cache/treeml/memory.sqlite is never read or written by a test)."""

from __future__ import annotations

import os

os.environ["TREEML_MEMORY"] = "off"  # engine/memory.py ENV; inherited by CLI subprocesses
