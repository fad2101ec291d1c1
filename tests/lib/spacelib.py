"""The whole kit under the one name the tests use (`spacelib.wait_for`, `spacelib.Daemon`, ...)."""

from lib.client import *  # noqa: F401,F403
from lib.daemon import *  # noqa: F401,F403
from lib.host import *  # noqa: F401,F403
