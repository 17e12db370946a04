"""Secrets never reach what infermeter writes or prints: argument values, error texts, the configured key."""

import pytest

from infermeter import redact
from infermeter.client.errors import RequestFailed, http_detail
from infermeter.measure.config import RunConfig
from infermeter.redact import clip, redact_args, redact_obj, redact_text, remember_secret, secret_flag


def test_secret_flag_values_are_masked_in_both_spellings_and_nothing_else_changes():
    args = ["--port", "8000", "--api-key", "sk-1", "--hf-token=hf_2", "--token", "t3", "--api-key-file", "f"]
    assert redact_args(args) == ["--port", "8000", "--api-key", "***", "--hf-token=***", "--token", "***",
                                 "--api-key-file", "f"]
    assert redact_args(["--api-key"]) == ["--api-key"]  # a flag without its value: nothing to mask
    assert redact_args(()) == []


def test_run_json_config_masks_the_emulators_key():
    cfg = RunConfig(emulator_args=["--api-key", "sk-emu", "--ttft-ms", "5"], api_key="sk-client")
    pub = cfg.public()
    assert pub["api_key"] == "***" and pub["emulator_args"] == ["--api-key", "***", "--ttft-ms", "5"]


# --- one redaction path: texts, the configured key, argv, JSON ---------------------------------------------

JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0" * 12 + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"


@pytest.mark.parametrize("text,secret", [
    ("invalid key sk-proj-AbCdEf0123456789xyz", "sk-proj-AbCdEf0123456789xyz"),
    ("Authorization: Bearer t0k3n.with.dots rest", "t0k3n.with.dots"),
    ('{"headers": {"authorization": "Basic dXNlcjpwYXNzd29yZA=="}}', "dXNlcjpwYXNzd29yZA=="),
    ("x-api-key: 9f8e7d6c5b4a next", "9f8e7d6c5b4a"),
    ("GET /v1/models?api_key=QWERTY123&x=1", "QWERTY123"),
    ("https://h/p?token=abc123&key=zzz999", "abc123"),
    ("https://h/p?token=abc123&key=zzz999", "zzz999"),
    ('{\\"api_key\\": \\"inner-json-secret\\"}', "inner-json-secret"),
    ("{'password': 'hunter22'}", "hunter22"),
    (f"token {JWT}", JWT[:8]),
    (f"token {JWT[:150]}", JWT[:40]),  # a JWT cut short is still one
    ("hub says hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", "AbCdEfGhIjKlMnOp"),
    ("git: ghp_0123456789abcdefABCDEF0123", "0123456789abcdef"),
])
def test_every_key_shape_is_masked_in_free_text(text, secret):
    out = redact_text(text)
    assert secret not in out and "***" in out


@pytest.mark.parametrize("text", [
    "connection broke after the first token: ServerDisconnectedError",
    "usage token counts are not non-negative integers: {'prompt_tokens': 1, 'completion_tokens': 2}",
    "max_tokens=5 first-token-timeout=30 basic usage",
    "HTTP 404 Not Found: The model llama does not exist",
    "model hf-internal-testing/tiny-random-LlamaForCausalLM on task-12345678",
])
def test_ordinary_error_texts_are_left_alone(text):
    assert redact_text(text) == text


def test_a_remembered_key_is_masked_whole_cut_or_with_only_its_first_characters_left(monkeypatch):
    monkeypatch.setattr(redact, "_remembered", set())
    key = "Zq7v0123456789abcdefXYZ"  # no known shape: only the literal value can find it
    assert redact_text(f"echo {key}!") == f"echo {key}!"  # not known yet
    remember_secret(key)
    assert redact_text(f"echo {key}!") == "echo ***!"
    assert redact_text(f"cut: {key[:11]}") == "cut: ***"
    assert redact_text(f"{key[:8]}'") == "***'"
    assert redact_text("Zq7v elsewhere") == "Zq7v elsewhere"  # 4 characters inside a text: not a trace of it
    assert redact_text(f"cut at {key[:6]}") == "cut at ***"  # ... but where a cut ended the text, they are
    assert redact_text(f"repr {key[:5]!r}") == "repr '***'"
    remember_secret("abc")  # too short to mask as a bare literal (it would mangle every text)
    assert redact_text("abc abc") == "abc abc"


def test_the_environment_key_is_masked_too(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "EnvKey-0123456789")
    assert "EnvKey-01" not in redact_text("server said EnvKey-0123456789")


def test_redaction_comes_before_the_cut_so_no_part_of_a_straddling_key_survives(monkeypatch):
    monkeypatch.setattr(redact, "_remembered", set())
    key = "Zq7v" + "0123456789abcdef" * 3
    remember_secret(key)
    body = "x" * 190 + " " + key + " tail"
    for detail in (http_detail(500, body), RequestFailed("http_5xx", "y" * 280 + " " + key).detail,
                   clip(body, 200)):
        assert key[:8] not in detail and key[4:12] not in detail, detail
    jwt_body = "denied " + JWT
    d = http_detail(401, jwt_body)
    assert JWT[:8] not in d and JWT[3:40] not in d and d.startswith("HTTP 401 Unauthorized: denied eyJ***")


def test_secret_flags_are_named_by_their_last_word():
    for flag in ("--api-key", "--hf-token", "--token", "--password", "--client-secret", "--auth-token", "--key"):
        assert secret_flag(flag), flag
    for flag in ("--api-key-file", "--max-tokens", "--first-token-timeout", "--port", "api-key"):
        assert not secret_flag(flag), flag
    args = ["--password=p4ss", "--client-secret", "cs", "--header", "Authorization: Bearer hdr",
            "--extra-body", '{"api_key": "eb"}', "--url", "http://h/?key=qk"]
    assert redact_args(args) == ["--password=***", "--client-secret", "***", "--header", "Authorization: Bearer ***",
                                 "--extra-body", '{"api_key": "***"}', "--url", "http://h/?key=***"]


def test_redact_obj_masks_secret_fields_argv_and_strings_and_keeps_the_rest():
    run = {"argv": ["run", "--api-key", "k1"], "config": {"api_key": "k2", "hf_token": "k3", "key": "c16",
           "extra_body": {"secret_key": "k4"}, "requests": 5}, "note": "Bearer k5", "label": "a [b]"}
    assert redact_obj(run) == {"argv": ["run", "--api-key", "***"], "config": {
        "api_key": "***", "hf_token": "***", "key": "c16", "extra_body": {"secret_key": "***"}, "requests": 5},
        "note": "Bearer ***", "label": "a [b]"}


def test_run_json_config_masks_keys_in_the_extra_body_and_remembers_the_key(monkeypatch):
    monkeypatch.setattr(redact, "_remembered", set())
    cfg = RunConfig(api_key="Zq7v-remembered-key", extra_body={"api_key": "body-key", "top_k": 5})
    pub = cfg.public()
    assert pub["extra_body"] == {"api_key": "***", "top_k": 5} and pub["api_key"] == "***"
    assert redact_text("echo Zq7v-remembered-key") == "echo ***"


def test_a_copied_engine_log_has_the_engines_own_key_masked(tmp_path):
    from infermeter.engines.target import LiveTarget, Target
    from infermeter.redact import secret_values

    args = ("--api-key", "Zq7v-engine-key-0001", "--hf-token=hf_secret_value_1", "--max-num-seqs", "4")
    assert secret_values(args) == ["Zq7v-engine-key-0001", "hf_secret_value_1"]
    log = tmp_path / "engine.log"
    log.write_text("old line\nnon-default args: {'api_key': ['Zq7v-engine-key-0001'], 'hf_token': 'hf_secret_value_1'}\n"
                   "started with --api-key Zq7v-engine-key-0001\n")
    live = LiveTarget(target=Target(name="t", engine="emulator", args=args), base_url="http://127.0.0.1:1", log_path=log)
    n = live.copy_log(len("old line\n"), tmp_path / "server.log")
    text = (tmp_path / "server.log").read_text()
    assert n == log.stat().st_size - len("old line\n") and "non-default args" in text and "old line" not in text
    assert "Zq7v-eng" not in text and "hf_secret" not in text


def test_a_summary_of_records_that_hold_a_key_does_not_repeat_it(tmp_path):
    """Records written before redaction (or by hand) with a key in a detail: summarize masks it."""
    import pyarrow as pa

    from infermeter.analysis.accumulator import Accumulator
    from infermeter.records.record import ARROW_SCHEMA

    n = 3
    cols = {f.name: pa.nulls(n, f.type) for f in ARROW_SCHEMA}
    cols.update(request_id=pa.array(range(n), pa.int64()), phase=pa.array(["measure"] * n),
                intended_at=pa.array([0.0, 0.1, 0.2]), sent_at=pa.array([0.0, 0.1, 0.2]),
                ended_at=pa.array([0.5, 0.6, 0.7]), outcome=pa.array(["error"] * n),
                error_class=pa.array(["http_4xx"] * n),
                error_detail=pa.array(["HTTP 401 Unauthorized: bad Authorization: Bearer Zq7v-old-leaked-key"] * n))
    table = pa.table({f.name: cols[f.name].cast(f.type) for f in ARROW_SCHEMA}, schema=ARROW_SCHEMA)
    acc = Accumulator()
    acc.add(table)
    msg = acc.summary().error_messages["http_4xx"]
    assert "Zq7v-old" not in msg and msg.startswith("HTTP 401 Unauthorized: bad Authorization: ")


def test_messages_that_speak_of_keys_are_left_alone():
    for text in ("--profile-set 'x': expected KEY=VALUE, e.g. --profile-set turns=3",
                 "column 'settings' item 'a': use key=value with key one of kv_dtype"):
        assert redact_text(text) == text
    assert redact_text("GET /m?key=abc&sig=def") == "GET /m?key=***&sig=***"


def test_basic_credentials_are_masked_but_not_basic_prose():
    assert redact_text("Authorization failed for Basic dXNlcjpwYXNzd29yZA==").endswith("Basic ***")
    assert redact_text("{'auth': 'Basic dXNlcjpwYXNz'}") == "{'auth': 'Basic ***'}"
    for text in ("the basic workload runs", "Basic Settings apply"):
        assert redact_text(text) == text
