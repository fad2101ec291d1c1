"""The security catalogue's case ids (docs/security-cases.txt) and the tests that cover them: a test of case
J26 is named test_j26_..., of V8 test_v08_..., of E2 test_e02_... (lower case, two digits). The security
suite's collection (tests/security/conftest.py) and its unit test (tests/security/test_catalogue.py) both
check that every case has a test or a reason in SKIPPED."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CASES_FILE = REPO / "docs" / "security-cases.txt"
SECURITY_TESTS = REPO / "tests" / "security"

CASE_LINE_RE = re.compile(r"([JVE])([1-9][0-9]?)\s+(\S.*)")
TEST_NAME_RE = re.compile(r"test_([jve])([0-9]{2})_")

# Cases without a test of their own, each with the reason. A case whose check only runs on some hosts (real
# KVM, a python rootfs) still has its test, which skips with the reason at run time; it is not listed here.
SKIPPED: dict[str, str] = {}


class CatalogueError(ValueError):
    pass


def case_ids(path: Path = CASES_FILE) -> dict[str, str]:
    """id -> one-line title, in the file's order; blank lines and # comments are skipped."""
    cases: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = CASE_LINE_RE.fullmatch(line.strip())
        if not m:
            raise CatalogueError(f"{path}:{n}: not '<J|V|E><number> <title>': {line!r}")
        case = m[1] + m[2]
        if case in cases:
            raise CatalogueError(f"{path}:{n}: {case} listed twice")
        cases[case] = m[3]
    if not cases:
        raise CatalogueError(f"{path}: no cases")
    return cases


def case_of(test_name: str) -> str | None:
    """'test_e02_odd_spellings[x]' -> 'E2'; None for a test that names no case."""
    m = TEST_NAME_RE.match(test_name)
    return f"{m[1].upper()}{int(m[2])}" if m else None


def test_names_in(directory: Path = SECURITY_TESTS) -> dict[str, list[str]]:
    """Test function name -> the files defining it, read from the source (no import, no daemon)."""
    names: dict[str, list[str]] = {}
    for path in sorted(directory.glob("test_*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                names.setdefault(node.name, []).append(path.name)
    return names


def coverage_problems(cases: dict[str, str], test_names, skipped: dict[str, str] = SKIPPED) -> list[str]:
    """What disagrees between the catalogue and the tests: a case with neither a test nor a skip reason, a
    test naming a case the catalogue lacks, a skip entry that is stale or has no reason."""
    covered: dict[str, list[str]] = {}
    problems = []
    for name in test_names:
        case = case_of(name)
        if case is None:
            continue
        if case not in cases:
            problems.append(f"{name} names {case}, which is not in {CASES_FILE.name}")
        covered.setdefault(case, []).append(name)
    for case, title in cases.items():
        if case not in covered and case not in skipped:
            problems.append(f"{case} ({title}) has no test_{case[0].lower()}{int(case[1:]):02d}_... in "
                            f"tests/security and no reason in SKIPPED (tests/lib/catalogue.py)")
    for case, reason in skipped.items():
        if case not in cases:
            problems.append(f"SKIPPED lists {case}, which is not in {CASES_FILE.name}")
        elif case in covered:
            problems.append(f"SKIPPED lists {case}, but {covered[case][0]} covers it")
        if not reason.strip():
            problems.append(f"SKIPPED gives no reason for {case}")
    return problems
