"""The egress fixtures moved to tests/lib/egress.py; this name stays for the integration tests' imports."""

from lib.egress import *  # noqa: F401,F403
