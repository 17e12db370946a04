"""engine up is not silent for minutes: the startup phases a server's log shows are reported in order."""

import os
import sys

from infermeter.engines.process import LogPhases, ServerProcess, free_port
from infermeter.engines.vllm_cpu import VLLM_PHASES

# a stand-in that logs vLLM's startup lines (as vllm-cpu 0.32.0 writes them), slowly, then serves /health
SERVER = r'''
import http.server, sys, time
port = int(sys.argv[1])
for line in ("(EngineCore pid=1) INFO core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: ...",
             "(Worker pid=2) INFO cpu_model_runner.py:68] Starting to load model /models/smollm2...",
             "(Worker pid=2) INFO cpu_model_runner.py:87] Warming up model for the compilation...",
             "(Worker pid=2) INFO cpu_model_runner.py:91] Warming up done.",
             "(EngineCore pid=1) INFO kv_cache_utils.py:2327] CPU KV cache size: 46,592 tokens",
             "(APIServer pid=0) INFO entry.py:140] Starting vLLM server on http://127.0.0.1:%d" % port):
    print(line, flush=True)
    time.sleep(0.25)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def test_phases_are_reported_in_order_while_waiting_for_health(tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    log.write_text("an older server's lines: Starting to load model (not this start)\n")
    proc = ServerProcess([sys.executable, "-c", SERVER, str(port)], env=dict(os.environ), log_path=log)
    phases = LogPhases(log, VLLM_PHASES)
    heard: list[tuple[str, float]] = []
    proc.start()
    try:
        proc.wait_healthy(f"http://127.0.0.1:{port}/health", timeout_s=30, poll_s=0.05,
                          on_poll=lambda s: heard.extend((p, s) for p in phases.poll()))
    finally:
        proc.stop(grace_s=5)
    names = [p.split(":")[0] for p, _ in heard]
    assert names == ["engine", "load", "compile", "kv cache", "serve"]
    assert [s for _, s in heard] == sorted(s for _, s in heard)


def test_a_phase_line_split_across_reads_is_still_seen(tmp_path):
    log = tmp_path / "l.log"
    log.write_text("")
    phases = LogPhases(log, VLLM_PHASES)
    with log.open("a") as fh:
        fh.write("INFO Starting to lo")
        fh.flush()
        assert phases.poll() == []
        fh.write("ad model x\n")
        fh.flush()
    assert [p.split(":")[0] for p in phases.poll()] == ["load"]


def test_the_engine_config_line_of_this_start_is_kept_as_the_log_is_followed(tmp_path):
    from infermeter.engines.vllm_cpu import ENGINE_CONFIG

    log = tmp_path / "shared.log"
    log.write_text("Initializing a V1 LLM engine (v0.31.0) with config: model='/m', dtype=torch.float32\n")  # an older start
    phases = LogPhases(log, VLLM_PHASES, keep=ENGINE_CONFIG)
    with log.open("a") as fh:
        fh.write("INFO Initializing a V1 LLM engine (v0.32.0) with config: model='/m', dtype=torch.bf")
        fh.flush()
        assert [p.split(":")[0] for p in phases.poll()] == [] and phases.kept == ""  # half a line: not yet
        fh.write("loat16, max_seq_len=2048\nINFO Initializing a V1 LLM engine (v9) with config: dtype=torch.half\n")
        fh.flush()
    assert [p.split(":")[0] for p in phases.poll()] == ["engine"]
    assert "(v0.32.0)" in phases.kept and "dtype=torch.bfloat16" in phases.kept  # the first of this start's


def test_vllm_cpu_server_environment_takes_extra_variables_last(tmp_path, monkeypatch):
    from infermeter.engines.vllm_cpu import VllmCpuEngine

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "from-the-shell")
    monkeypatch.setenv("VIRTUAL_ENV", "/the/project/venv")
    env = VllmCpuEngine(cache_dir=tmp_path, env={"ONEDNN_MAX_CPU_ISA": "AVX2", "VLLM_CPU_KVCACHE_SPACE": "1"}).environment()
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the caller's word wins
    assert env["HF_HUB_OFFLINE"] == "1" and "VIRTUAL_ENV" not in env
    assert VllmCpuEngine(cache_dir=tmp_path).environment()["ONEDNN_MAX_CPU_ISA"] == "from-the-shell"


def test_vllm_cpu_dtype_is_float32_where_the_cpu_has_no_bf16_matmul(tmp_path):
    from infermeter.engines.vllm_cpu import VllmCpuEngine, cpu_flags, resolve_dtype

    avx2 = frozenset("fpu sse2 avx avx2 fma f16c".split())
    zen4 = avx2 | {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"}
    assert resolve_dtype("auto", avx2)[0] == "float32" and "no AVX-512" in resolve_dtype("auto", avx2)[1]
    assert resolve_dtype("auto", zen4)[0] is None  # the model's bf16
    assert resolve_dtype("auto", avx2 | {"amx_bf16"})[0] is None
    assert resolve_dtype("auto", frozenset("fp asimd bf16".split()))[0] is None  # not x86: the model's own
    assert resolve_dtype("auto", frozenset())[0] is None  # unknown CPU: the model's own
    assert resolve_dtype("bfloat16", avx2)[0] == "bfloat16"
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx2\n")
    assert cpu_flags(str(info)) == {"fpu", "sse2", "avx2"} and cpu_flags(str(tmp_path / "none")) == frozenset()
    eng = VllmCpuEngine(cache_dir=tmp_path, port=8000, dtype="float16")
    cmd = eng.command(tmp_path)
    assert cmd[cmd.index("--dtype") + 1] == "float16"
    eng = VllmCpuEngine(cache_dir=tmp_path, port=8000, dtype="float16", extra_args=("--dtype=bfloat16",))
    assert "--dtype" not in eng.command(tmp_path)  # the user's own flag wins, given once


def test_vllm_cpu_auto_dtype_follows_the_cpu_and_a_given_dtype_is_passed_once(tmp_path, monkeypatch):
    import pytest

    from infermeter.engines import vllm_cpu

    monkeypatch.setattr(vllm_cpu, "cpu_flags", lambda path="/proc/cpuinfo": frozenset({"sse2", "avx2", "fma"}))
    cmd = vllm_cpu.VllmCpuEngine(cache_dir=tmp_path, port=8000).command(tmp_path)
    assert cmd.count("--dtype") == 1 and cmd[cmd.index("--dtype") + 1] == "float32"
    cmd = vllm_cpu.VllmCpuEngine(cache_dir=tmp_path, port=8000, extra_args=("--dtype", "bfloat16")).command(tmp_path)
    assert cmd.count("--dtype") == 1 and cmd[cmd.index("--dtype") + 1] == "bfloat16"
    monkeypatch.setattr(vllm_cpu, "cpu_flags", lambda path="/proc/cpuinfo": frozenset({"sse2", "avx512f", "avx512bw"}))
    assert "--dtype" not in vllm_cpu.VllmCpuEngine(cache_dir=tmp_path, port=8000).command(tmp_path)
    # a campaign file's env and dtype are checked when the engine is made (target.py turns TypeError into ConfigError)
    assert vllm_cpu.VllmCpuEngine(cache_dir=tmp_path, env={"OMP_NUM_THREADS": 2}).env == {"OMP_NUM_THREADS": "2"}
    with pytest.raises(TypeError, match="env must map"):
        vllm_cpu.VllmCpuEngine(cache_dir=tmp_path, env=["OMP_NUM_THREADS=2"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dtype must be a name"):
        vllm_cpu.VllmCpuEngine(cache_dir=tmp_path, dtype=16)  # type: ignore[arg-type]


def test_vllm_cpu_launch_info_reads_the_dtype_the_server_runs_and_keeps_env_values_out(tmp_path):
    from infermeter.engines.vllm_cpu import VllmCpuEngine

    eng = VllmCpuEngine(cache_dir=tmp_path, port=8000, env={"HF_TOKEN": "hf_secret", "OMP_NUM_THREADS": "2"})
    cmd = ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--api-key", "sk-live",
           "--dtype", "float32"]
    log = ("INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/m', "
           "tokenizer_mode=auto, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=2048\n")
    got = eng.launch_info(cmd, "why", log)
    # the log says what the server runs, even against the flag (a user's --dtype in extra args wins over ours)
    assert got["dtype"] == "bfloat16" and got["dtype_source"] == "server log" and got["vllm_version"] == "0.32.0"
    assert got["args"] == ["--model", "/m", "--api-key", "***", "--dtype", "float32"] and got["dtype_reason"] == "why"
    assert "sk-live" not in repr(got)  # a secret in the server's arguments stays out of results
    assert got["env"] == ["HF_TOKEN", "OMP_NUM_THREADS"] and "hf_secret" not in repr(got)  # names, never values
    got = eng.launch_info(cmd[:-2] + ["--dtype=float16"], "why", "no config line yet\n")
    assert got["dtype"] == "float16" and got["dtype_source"] == "--dtype" and got["vllm_version"] is None
    got = eng.launch_info(cmd[:-2], "the model's dtype", "")
    assert got["dtype"] is None and got["dtype_source"] is None
