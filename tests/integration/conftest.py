"""Harness for the integration suite: a real spaced (session-scoped `daemon`), the busybox template, and
per-test sandboxes. The fixtures live in spacefixtures.py so that tests/security shares the same daemon."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spacefixtures import *  # noqa: E402,F401,F403  (fixtures and the report hook)
