"""SPACE's test kit, shared by tests/integration, tests/security and bench/run: the REST client over
spaced's unix socket (client), the daemon harness (daemon), host-side oracles (host), the pytest fixtures
built on them (fixtures, egress) and the catalogue of security cases (catalogue).

Importable as `lib` with tests/ on sys.path (each conftest.py and bench/run put it there)."""
