"""End-to-end: infermeter run against the emulator (counts, rates, timings, errors, files)."""

import asyncio
import json

import pyarrow.parquet as pq
import pytest

from infermeter.measure import Measurement, RunConfig


def run(cfg: RunConfig):
    return asyncio.run(Measurement(cfg).run())


def test_closed_loop_counts_and_timings_match_the_emulator(emulator, tmp_path):
    r = run(RunConfig(url=emulator.base_url, concurrency=8, requests=60, warmup=4, input_tokens="100",
                      output_tokens="20", out=str(tmp_path / "r")))
    s = r.summary
    assert s["completed"] == 60 and s["failed"] == 0
    table = pq.read_table(tmp_path / "r" / "requests.parquet")
    assert table.num_rows == 64
    assert sorted(table.column("phase").to_pylist()).count("warmup") == 4
    # emulator: TTFT 40 ms, 8 ms/token (loopback adds little)
    assert 38 <= s["ttft_ms"]["p50"] <= 80
    assert 7.5 <= s["tpot_ms"]["p50"] <= 11
    assert 6 <= s["itl_ms"]["mean"] <= 11
    assert s["mean_output_tokens"] == 20
    assert s["token_count_source"] == "server"
    run_json = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run_json["model"] == "infermeter-emulator" and run_json["seed"] == 0
    assert s["valid"], s["invalid_reasons"]


def test_open_loop_reaches_its_rate(emulator, tmp_path):
    r = run(RunConfig(url=emulator.base_url, rate=40, arrival="constant", requests=80, input_tokens="50",
                      output_tokens="5", out=str(tmp_path / "r")))
    s = r.summary
    assert s["completed"] == 80
    assert s["achieved_rate"] == pytest.approx(40, rel=0.05)
    assert s["schedule_lag_ms"]["p50"] < 5
    assert s["ttft_from_intended_ms"]["p50"] >= s["ttft_ms"]["p50"]


def test_max_concurrency_cap_that_holds_requests_back_invalidates(emulator, tmp_path):
    r = run(RunConfig(url=emulator.base_url, rate=50, arrival="constant", requests=30, max_concurrency=1,
                      output_tokens="10", out=str(tmp_path / "r")))
    assert not r.summary["valid"]
    assert any(x.startswith("cap_held") for x in r.summary["invalid_reasons"])


def test_cli_run_writes_three_files_and_keeps_the_api_key_secret(emulator, tmp_path, cli, infermeter_bin):
    out = tmp_path / "cli"
    p = cli("run", "--url", emulator.base_url, "--model", "infermeter-emulator", "--concurrency", "8",
            "--requests", "100", "--output-tokens", "4", "--out", str(out), env={"OPENAI_API_KEY": "sk-secret-123"})
    assert p.returncode == 0, p.stderr
    assert {f.name for f in out.iterdir()} >= {"summary.json", "requests.parquet", "run.json"}
    s = json.loads((out / "summary.json").read_text())
    for key in ("completed", "failed", "duration_s", "request_throughput", "input_token_throughput",
                "output_token_throughput", "valid", "invalid_reasons"):
        assert key in s
    for d in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(s[d]) >= {"mean", "p50", "p90", "p95", "p99", "p999"}
    assert s["completed"] == 100
    for f in out.iterdir():
        assert b"sk-secret-123" not in f.read_bytes()
    assert "sk-secret-123" not in p.stdout + p.stderr


def test_faults_are_classified_and_no_record_is_lost(tmp_path):
    from infermeter.engines.emulator.process import EmulatorProcess

    faults = "429=0.1,500=0.1,503=0.05,cut=0.1,stall=0.05,malformed=0.1,reset=0.05,slow_first_byte=0.05"
    with EmulatorProcess(["--ttft-ms", "5", "--itl-ms", "2", "--faults", faults, "--stall-s", "3"]) as emu:
        r = run(RunConfig(url=emu.base_url, concurrency=16, requests=200, output_tokens="8",
                          first_token_timeout_s=1.0, out=str(tmp_path / "f")))
    s = r.summary
    assert s["completed"] + s["failed"] == 200
    assert pq.read_table(tmp_path / "f" / "requests.parquet").num_rows == 200
    assert set(s["errors"]) == {"http_429", "http_5xx", "stream_cut", "first_token_timeout", "malformed_response",
                                "connect_error"}
    assert s["completed"] > 40


def test_unreachable_url_is_one_line_error(tmp_path, cli, infermeter_bin):
    p = cli("run", "--url", "http://127.0.0.1:9", "--requests", "3", "--out", str(tmp_path / "x"))
    assert p.returncode == 2
    assert "cannot reach http://127.0.0.1:9" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args,needle", [
    (["--rate", "5", "--concurrency", "2", "--requests", "3"], "--concurrency and --rate"),
    (["--requests", "3", "--slo", "ttft=5"], "--slo"),
    (["--requests", "3", "--extra-body", "{oops"], "--extra-body"),
    (["--requests", "3", "--input-tokens", "abc"], "--input-tokens"),
    (["--requests", "3", "--arrival", "weird"], "arrival"),
])
def test_bad_flags_give_one_line_errors(args, needle, tmp_path, cli, infermeter_bin):
    p = cli("run", "--url", "http://127.0.0.1:9", *args, "--out", str(tmp_path / "x"))
    assert p.returncode == 2
    assert needle in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_garbage_server_is_reported_and_results_kept(tmp_path, cli, infermeter_bin):
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Garbage(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"not json at all")

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"data: <html>garbage</html>\n\n")

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), Garbage)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "g"
        p = cli("run", "--url", f"http://127.0.0.1:{srv.server_port}", "--model", "m", "--requests", "5",
                "--out", str(out))
    finally:
        srv.shutdown()
    assert p.returncode == 2
    assert "malformed_response" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    s = json.loads((out / "summary.json").read_text())
    assert s["failed"] == 5 and s["errors"] == {"malformed_response": 5}
