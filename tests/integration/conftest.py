"""Harness for the integration suite: a real spaced (session-scoped `daemon`), the busybox template, and
per-test sandboxes. The fixtures live in the test kit (tests/lib) that tests/security and bench/run share."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the kit's old names (spacelib, spacefixtures, egressfixtures) live here
sys.path.insert(0, os.path.dirname(HERE))  # tests/, for the kit: `lib`

from lib.fixtures import *  # noqa: E402,F401,F403  (fixtures and the report hook)
