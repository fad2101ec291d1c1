"""API keys: the TCP listener requires a bearer key; the unix socket is trusted by file permissions and
is the only place where keys are managed."""

import json

import pytest

import spacelib
from spacelib import Client, run_cli


@pytest.fixture
def tcp_daemon(own_daemon):
    port = spacelib.free_port()
    d = own_daemon(extra_args=["--listen", f"127.0.0.1:{port}"], build_template=False)
    d.tcp_port = port
    return d


def test_tcp_requires_a_valid_key(tcp_daemon):
    d = tcp_daemon
    anon = Client(tcp=("127.0.0.1", d.tcp_port))
    status, _, body = anon.raw("GET", "/v1/sandboxes")
    assert status == 401, (status, body)
    assert json.loads(body)["error"]["code"] == "unauthenticated"

    bad = Client(tcp=("127.0.0.1", d.tcp_port), api_key="not-a-real-key")
    assert bad.raw("GET", "/v1/sandboxes")[0] == 401
    for header in ("Bearer", "Basic Zm9vOmJhcg==", "Bearer " + "x" * 5000, "bearer  "):
        status, _, _ = anon.raw("GET", "/v1/sandboxes", headers={"Authorization": header})
        assert status in (400, 401), (header[:20], status)

    key = d.client.create_key("test-key")
    assert key["secret"] and key["id"] and key["name"] == "test-key", key
    assert key["secret"].startswith(key["prefix"]), key
    good = Client(tcp=("127.0.0.1", d.tcp_port), api_key=key["secret"])
    status, _, body = good.raw("GET", "/v1/sandboxes")
    assert status == 200, (status, body)
    assert "sandboxes" in json.loads(body)

    listed = d.client.keys()
    mine = [k for k in listed if k["id"] == key["id"]]
    assert mine and mine[0]["name"] == "test-key"
    assert "secret" not in mine[0] or not mine[0]["secret"], "the secret must be shown only once"
    assert key["secret"] not in json.dumps(listed)

    # A near miss of the real secret fails.
    near = key["secret"][:-1] + ("a" if key["secret"][-1] != "a" else "b")
    assert Client(tcp=("127.0.0.1", d.tcp_port), api_key=near).raw("GET", "/v1/sandboxes")[0] == 401

    d.client.revoke_key(key["id"])
    assert good.raw("GET", "/v1/sandboxes")[0] == 401
    assert d.client.healthy()

    # Revoked keys are listed until purged; a purged key stays refused, and active keys stay.
    other = d.client.create_key("kept-key")
    kept = Client(tcp=("127.0.0.1", d.tcp_port), api_key=other["secret"])
    r = run_cli(d.sock, "key", "purge", "--older-than", "1h")
    assert r.returncode == 0 and r.stdout.decode() == "0 revoked key(s) purged\n", r
    r = run_cli(d.sock, "key", "purge")
    assert r.returncode == 0 and r.stdout.decode() == "1 revoked key(s) purged\n", r
    assert {k["id"] for k in d.client.keys()} == {other["id"]}
    assert good.raw("GET", "/v1/sandboxes")[0] == 401
    assert kept.raw("GET", "/v1/sandboxes")[0] == 200


def test_keys_cannot_be_managed_over_tcp(tcp_daemon):
    d = tcp_daemon
    key = d.client.create_key("tcp-admin-attempt")
    c = Client(tcp=("127.0.0.1", d.tcp_port), api_key=key["secret"])
    for method, path, body in (("POST", "/v1/keys", {"name": "escalate"}), ("GET", "/v1/keys", None),
                               ("DELETE", f"/v1/keys/{key['id']}", None)):
        status, _, resp = c.raw(method, path, body)
        assert status == 403, (method, path, status, resp)
    assert not any(k["name"] == "escalate" for k in d.client.keys())
    # The key still works (DELETE over TCP did nothing).
    assert c.raw("GET", "/v1/sandboxes")[0] == 200


def test_healthz_over_tcp(tcp_daemon):
    anon = Client(tcp=("127.0.0.1", tcp_daemon.tcp_port))
    status, _, body = anon.raw("GET", "/healthz")
    # Public, as the contract says: liveness probes and load balancers carry no key.
    assert status == 200, (status, body)
    assert json.loads(body) == {"status": "ok"}
    # Nothing else is public.
    assert anon.raw("GET", "/metrics")[0] == 401
    assert anon.raw("GET", "/v1/node")[0] == 401


def test_unix_socket_permissions(daemon):
    import os
    import stat
    st = os.stat(daemon.sock)
    assert stat.S_ISSOCK(st.st_mode)
    assert st.st_mode & 0o007 == 0, f"socket mode {oct(st.st_mode)} lets any local user drive spaced"
