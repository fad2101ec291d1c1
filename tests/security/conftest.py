"""The security suite: every case of the catalogue (docs/security-cases.txt) as test_<id>_..., run against
the same session daemon and fixtures as the integration suite (the test kit in tests/lib).

A run that collects the whole directory fails at collection when a case has no test (and no reason in
tests/lib/catalogue.py's SKIPPED): a renamed or deleted test cannot silently drop a case."""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for the kit: `lib`

from lib import catalogue  # noqa: E402
from lib.fixtures import *  # noqa: E402,F401,F403  (fixtures and the report hook)


def collects_the_whole_suite(config) -> bool:
    """True when some argument names this directory or one above it (a run of one file or one test
    checks only what it selected)."""
    base = Path(config.invocation_params.dir)
    for arg in config.args:
        if "::" in arg:
            continue
        path = (base / arg).resolve()
        if path == HERE or path in HERE.parents:
            return True
    return False


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselect: deselected tests still cover their case
def pytest_collection_modifyitems(session, config, items):
    if not collects_the_whole_suite(config):
        return
    names = [item.originalname if hasattr(item, "originalname") else item.name
             for item in items if HERE in Path(str(item.fspath)).resolve().parents]
    problems = catalogue.coverage_problems(catalogue.case_ids(), names)
    if problems:
        raise pytest.UsageError("the security catalogue and tests/security disagree:\n  " +
                                "\n  ".join(problems))
