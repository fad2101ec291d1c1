"""The catalogue of security cases (docs/security-cases.txt) against the tests of tests/security, read from
their source: no daemon, no root."""

import pytest

from lib import catalogue


def test_the_case_list_parses_in_catalogue_order():
    cases = catalogue.case_ids()
    for tier, count in (("J", 28), ("V", 9), ("E", 21)):
        assert [c for c in cases if c[0] == tier] == [f"{tier}{n}" for n in range(1, count + 1)], cases


def test_every_case_has_a_test_or_a_reason_and_every_test_names_a_listed_case():
    problems = catalogue.coverage_problems(catalogue.case_ids(), catalogue.test_names_in())
    assert not problems, "\n".join(problems)


def test_no_test_name_is_defined_twice():
    twice = {name: files for name, files in catalogue.test_names_in().items() if len(files) > 1}
    assert not twice, twice


def test_a_missing_case_a_stale_skip_and_an_unknown_id_are_each_reported():
    cases = {"J1": "status", "J2": "uids", "E1": "literals"}
    problems = catalogue.coverage_problems(cases, ["test_j01_status", "test_e01_x", "test_v04_identity"],
                                           skipped={"E1": "a reason"})
    assert any(p.startswith("J2 ") for p in problems), problems
    assert any("test_v04_identity names V4" in p for p in problems), problems
    assert any("SKIPPED lists E1, but test_e01_x covers it" in p for p in problems), problems
    assert len(problems) == 3, problems


@pytest.mark.parametrize("name, case", [("test_e02_odd_spellings", "E2"), ("test_j26_x[param]", "J26"),
                                        ("test_v08_spoof", "V8"), ("test_e2_one_digit", None),
                                        ("test_odd_ipv4_spellings_are_denied_E2", None)])
def test_case_of_reads_the_two_digit_lower_case_prefix(name, case):
    assert catalogue.case_of(name) == case


def test_a_malformed_line_is_a_clear_error(tmp_path):
    bad = tmp_path / "cases.txt"
    bad.write_text("J1 fine\nJ 2 no number\n")
    with pytest.raises(catalogue.CatalogueError, match=r"cases.txt:2: not"):
        catalogue.case_ids(bad)
