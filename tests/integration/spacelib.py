"""The test kit moved to tests/lib; this name stays for the integration tests' `import spacelib`."""

from lib.spacelib import *  # noqa: F401,F403
