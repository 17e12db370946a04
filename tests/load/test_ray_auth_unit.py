"""ray_auth: where a token is found, and the one line a refused connect adds."""

from __future__ import annotations

import pytest

from infermeter.load import ray_auth

REFUSAL = ("[2026-12-03 14:12:23,557 W 9691 9735] gcs_client.cc:210: Failed to get cluster ID from GCS server: "
           "Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing or incorrect\n")


def test_token_source_names_where_the_token_is_never_its_value(tmp_path):
    assert ray_auth.token_source({}, tmp_path) is None
    assert ray_auth.token_source({"RAY_AUTH_TOKEN": "s3cr3t"}, tmp_path) == "RAY_AUTH_TOKEN"
    assert "s3cr3t" not in (ray_auth.token_source({"RAY_AUTH_TOKEN_PATH": "/x/tok"}, tmp_path) or "")
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("s3cr3t")
    assert ray_auth.token_source({}, tmp_path) == "~/.ray/auth_token"


@pytest.mark.parametrize("env,want", [({}, "no token was given"),
                                      ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "x"}, "refused the token from RAY_AUTH_TOKEN"),
                                      ({"RAY_AUTH_MODE": "disabled"}, "runs with RAY_AUTH_MODE=disabled")])
def test_failure_hint_says_what_to_set(monkeypatch, tmp_path, env, want):
    for k in (ray_auth.MODE, ray_auth.TOKEN, ray_auth.TOKEN_PATH):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert want in ray_auth.failure_hint("h:6379", REFUSAL)
    assert ray_auth.failure_hint("h:6379", "some other failure\n") == ""


def test_connecting_holds_back_auth_warnings_and_echoes_the_rest(capfd, monkeypatch):
    import os
    monkeypatch.delenv(ray_auth.WAIT_ENV, raising=False)
    log: list[str] = []
    with ray_auth.connecting(log):
        assert os.environ[ray_auth.WAIT_ENV] == str(ray_auth.CONNECT_WAIT_S)
        os.write(2, (REFUSAL + "another line\n").encode())
    assert ray_auth.WAIT_ENV not in os.environ          # Ray's connect window is cut only around the connect
    err = capfd.readouterr().err
    assert "another line" in err and "InvalidAuthToken" not in err
    assert ray_auth.refused(log[0])
