"""The fixtures moved to tests/lib/fixtures.py; this name stays for the integration tests' imports."""

from lib.fixtures import *  # noqa: F401,F403
from lib.fixtures import _skip_if_no_binaries  # noqa: F401  (test_kvm.py)
