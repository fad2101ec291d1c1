"""The security suite reuses the integration harness (same session daemon) from tests/integration."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))

from spacefixtures import *  # noqa: E402,F401,F403
