"""Read another tool's result file into :class:`~infermeter.interop.common.Imported` runs.

Promise: :func:`detect` names the format of a file from its content (``vllm-bench``, ``guidellm``,
``aiperf``, ``inference-benchmarker``), :func:`read_file` parses it; a file that is not one of them, or lacks a field the format
needs, raises :class:`~infermeter.errors.DataError` naming the file and the field. Per-request data are
kept as records (``records.RequestRecord`` fields, seconds from the first send):

- ``vllm bench serve --save-result --save-detailed``: ``start_times`` (send), ``queue_times`` (intended =
  send - queue time; unpaced under ``--max-concurrency`` it is the wait for a free stream: intended = send), ``ttfts``, ``itls`` (chunk arrivals = first token + cumulative gaps), ``latencies``
  (end), ``input_lens`` / ``output_lens`` (tokens), ``errors``. Without ``--save-detailed`` the aggregates
  (``mean_ttft_ms`` ...) are copied.
- GuideLLM ``benchmarks.json``: each request's ``info.timings`` (``request_start``, ``first_token_iteration``,
  ``last_request_iteration``, ``token_iterations``) and token counts; one run per benchmark.
- AIPerf ``profile_export.jsonl`` (``metadata.request_start_ns``, ``metrics.time_to_first_token``,
  ``inter_chunk_latency``, ``request_latency``, usage or sequence lengths); ``profile_export_aiperf.json``
  uses the JSONL beside it when present, else its aggregates are copied.
- inference-benchmarker results JSON (``config``, ``results``; v1.1.0's ``BenchmarkReportWriter``): no
  per-request data, so each result but the ``warmup`` step is one run of copied aggregates, each with the
  tool's definition (its ``inter_token_latency_ms`` is a per-request mean, infermeter's TPOT family).
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from infermeter.analysis.results import MIN_SAMPLES
from infermeter.errors import DataError
from infermeter.interop.common import Imported, bad

FORMATS = ("vllm-bench", "guidellm", "aiperf", "inference-benchmarker")


def _load_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not readable ({exc})") from None
    if path.suffix.lower() == ".csv":
        return _aiperf_csv(text, path)
    try:
        return json.loads(text)
    except ValueError:
        pass
    rows = []
    for n, line in enumerate(text.splitlines(), 1):  # JSON lines (AIPerf records, vllm bench --append-result)
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise DataError(f"{path}:{n}: not JSON (expected a JSON object or JSON lines)") from None
    return rows


_CSV_TAGS = {"Time to First Token (ms)": "time_to_first_token", "Inter Token Latency (ms)": "inter_token_latency",
             "Inter Chunk Latency (ms)": "inter_chunk_latency", "Request Latency (ms)": "request_latency",
             "Benchmark Duration (sec)": "benchmark_duration", "Request Count": "request_count",
             "Request Throughput (requests/sec)": "request_throughput",
             "Output Token Throughput (tokens/sec)": "output_token_throughput",
             "Input Token Throughput (tokens/sec)": "input_token_throughput",
             "Total Token Throughput (tokens/sec)": "total_token_throughput"}


def _aiperf_csv(text: str, path: Path) -> dict[str, Any]:
    """AIPerf's ``profile_export_aiperf.csv`` (a statistics table, then a value table) as its JSON's shape."""
    import csv
    import io

    out: dict[str, Any] = {"aiperf_version": None}
    header: list[str] = []
    for row in csv.reader(io.StringIO(text)):
        if not row or not any(row):
            header = []
            continue
        if row[0] == "Metric":
            header = row
            continue
        if not header:
            raise bad(path, "header", "not an AIPerf profile export CSV (no 'Metric' header)")
        tag = _CSV_TAGS.get(row[0])
        if tag is None:
            continue
        stats: dict[str, Any] = {}
        for name, cell in zip(header[1:], row[1:]):
            try:
                stats["avg" if name.lower() == "value" else name] = float(cell) if cell else None
            except ValueError:
                raise bad(path, f"{row[0]}.{name}", f"expected a number, got {cell!r}") from None
        out[tag] = stats
    if "benchmark_duration" not in out:
        raise bad(path, "Benchmark Duration (sec)", "missing")
    return out


def detect(data: Any, path: Path) -> str:
    first = data[0] if isinstance(data, list) and data else data
    if isinstance(first, dict):
        results, config = first.get("results"), first.get("config")
        if isinstance(results, list) and isinstance(config, dict) and (
                "benchmark_kind" in config or any(isinstance(r, dict) and "executor_type" in r for r in results)):
            return "inference-benchmarker"
        if "benchmarks" in first and ("guidellm_version" in (first.get("metadata") or {}) or isinstance(first["benchmarks"], list)):
            return "guidellm"
        if "aiperf_version" in first or ("metadata" in first and "request_start_ns" in (first.get("metadata") or {})):
            return "aiperf"
        if "duration" in first and ("backend" in first or "endpoint_type" in first or "ttfts" in first):
            return "vllm-bench"
    raise DataError(f"{path}: not a result file infermeter can import (vllm bench serve JSON, GuideLLM "
                    f"benchmarks JSON, AIPerf profile export, inference-benchmarker results JSON); use --format to name it")


def read_file(path: Path, fmt: str | None = None) -> list[Imported]:
    path = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise DataError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    data = _load_json(path)
    fmt = fmt or detect(data, path)
    if fmt == "vllm-bench":
        items = data if isinstance(data, list) else [data]
        return [read_vllm_bench(d, path, i if len(items) > 1 else None) for i, d in enumerate(items)]
    if fmt == "guidellm":
        return read_guidellm(data, path)
    if fmt == "inference-benchmarker":
        return read_inference_benchmarker(data, path)
    return [read_aiperf(data, path)]


# -- helpers ----------------------------------------------------------------------------------------
def _num(v: Any, path: Path, where: str, *, optional: bool = False) -> float | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise bad(path, where, f"expected a number, got {v!r}"[:120])
    return float(v)


def _streams(v: Any) -> int | None:
    """``v`` when it is a count of streams (a positive int, not a bool), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _list(d: dict[str, Any], key: str, n: int | None, path: Path) -> list[Any]:
    v = d.get(key)
    if not isinstance(v, list):
        raise bad(path, key, f"expected a list, got {type(v).__name__}")
    if n is not None and len(v) != n:
        raise bad(path, key, f"has {len(v)} entries, start_times has {n}")
    return v


def error_class(text: str) -> str:
    """An infermeter error class for another tool's error text."""
    t = text.lower()
    if "429" in t:
        return "http_429"
    if re.search(r"\b5\d\d\b", t):
        return "http_5xx"
    if re.search(r"\b4\d\d\b", t):
        return "http_4xx"
    if "timeout" in t or "timed out" in t:
        return "total_timeout"
    if "connect" in t:
        return "connect_error"
    return "malformed_response"


def _dist(count: int, mean: Any = None, stdev: Any = None, p50: Any = None, p90: Any = None, p95: Any = None,
          p99: Any = None, mn: Any = None, mx: Any = None, scale: float = 1.0) -> dict[str, Any]:
    """A summary distribution from copied statistics; a percentile with too few samples stays null."""
    def f(v: Any) -> float | None:
        return float(v) * scale if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
    out = {"count": int(count), "mean": f(mean), "stdev": f(stdev), "min": f(mn), "max": f(mx), "p999": None}
    for k, v in (("p50", p50), ("p90", p90), ("p95", p95), ("p99", p99)):
        out[k] = f(v) if count >= MIN_SAMPLES[k] else None
    return out


def _rate_load(tool: str, rate: Any, extra: str = "") -> dict[str, Any]:
    finite = isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate)
    return {"describe": f"{tool}: " + (f"open loop, {rate:g} req/s" if finite else "closed loop / unpaced") + extra,
            "open_loop": finite, **({"target_rate": float(rate)} if finite else {})}


# -- vllm bench serve ---------------------------------------------------------------------------------
def read_vllm_bench(d: dict[str, Any], path: Path, index: int | None = None) -> Imported:
    if not isinstance(d, dict):
        raise bad(path, "top level", "expected a JSON object")
    where = path if index is None else Path(f"{path}[{index}]")
    rate = d.get("request_rate")
    rate = math.inf if rate in ("inf", None) else _num(rate, where, "request_rate")
    cap = d.get("max_concurrency")
    started = None
    if isinstance(d.get("date"), str):
        try:
            started = datetime.strptime(d["date"], "%Y%m%d-%H%M%S").isoformat()
        except ValueError:
            started = None
    imp = Imported(tool="vllm-bench", version=d.get("vllm_version") if isinstance(d.get("vllm_version"), str) else None,
                   path=where, model=d.get("model_id") if isinstance(d.get("model_id"), str) else None,
                   label=d.get("label") if isinstance(d.get("label"), str) else None, started_at=started,
                   load=_rate_load("vllm bench serve", rate, f", max concurrency {cap}" if cap else ""))
    if rate is not None and math.isinf(rate) and _streams(cap):
        imp.load["concurrency"] = cap  # unpaced under --max-concurrency N: a closed loop of N streams
    imp.extra = {k: d[k] for k in ("max_output_tokens_per_s", "max_concurrent_requests", "request_goodput",
                                   "burstiness", "num_prompts", "backend") if d.get(k) is not None}
    if isinstance(d.get("ttfts"), list) and isinstance(d.get("start_times"), list) and isinstance(d.get("itls"), list):
        imp.rows = _vllm_rows(d, where, closed="concurrency" in imp.load)
        return imp
    completed = int(_num(d.get("completed"), where, "completed") or 0)
    duration = _num(d.get("duration"), where, "duration")
    imp.copied = {
        "duration_s": duration, "completed": completed, "failed": int(d.get("failed") or 0),
        "scheduled": completed + int(d.get("failed") or 0),
        "request_throughput": _num(d.get("request_throughput"), where, "request_throughput"),
        "output_token_throughput": _num(d.get("output_throughput"), where, "output_throughput", optional=True),
        "total_token_throughput": _num(d.get("total_token_throughput"), where, "total_token_throughput", optional=True),
        "total_input_tokens": int(d.get("total_input_tokens") or 0),
        "total_output_tokens": int(d.get("total_output_tokens") or 0),
    }
    n_in, n_out = imp.copied["total_input_tokens"], imp.copied["total_output_tokens"]
    imp.copied |= {"input_token_throughput": n_in / duration if duration else None,  # cost prices input tokens too
                   "mean_input_tokens": n_in / completed if completed else None,
                   "mean_output_tokens": n_out / completed if completed else None}
    for ours, theirs in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"), ("e2e_ms", "e2el")):
        if f"mean_{theirs}_ms" in d:
            imp.copied[ours] = _dist(completed, d.get(f"mean_{theirs}_ms"), d.get(f"std_{theirs}_ms"),
                                     d.get(f"median_{theirs}_ms"), d.get(f"p90_{theirs}_ms"),
                                     d.get(f"p95_{theirs}_ms"), d.get(f"p99_{theirs}_ms"))
    imp.copied_definitions = {
        "duration_s": "vllm bench: wall time of the benchmark, first send to last completion",
        "request_throughput": "vllm bench: completed / duration",
        "output_token_throughput": "vllm bench: total output tokens / duration",
        "input_token_throughput": "vllm bench: total input tokens / duration",
        "ttft_ms": "vllm bench: to the first payload with choices (chat: the role chunk)",
        "tpot_ms": "vllm bench: (latency - TTFT) / (output tokens - 1)",
        "itl_ms": "vllm bench: pooled gaps between payloads with choices",
        "e2e_ms": "vllm bench: to the last payload with choices",
    }
    return imp


def _vllm_rows(d: dict[str, Any], path: Path, closed: bool = False) -> list[dict[str, Any]]:
    """Per-request rows; ``closed`` (unpaced under --max-concurrency): queue_times is the wait for a free stream,
    not a delay behind a schedule, so a request is intended when it is sent (infermeter's closed loop)."""
    starts = _list(d, "start_times", None, path)
    n = len(starts)
    ttfts, itls = _list(d, "ttfts", n, path), _list(d, "itls", n, path)
    lat: list[Any] = _list(d, "latencies", n, path) if "latencies" in d else [None] * n
    queue: list[Any] = _list(d, "queue_times", n, path) if "queue_times" in d else [None] * n
    ins: list[Any] = _list(d, "input_lens", n, path) if "input_lens" in d else [None] * n
    outs: list[Any] = _list(d, "output_lens", n, path) if "output_lens" in d else [None] * n
    errs: list[Any] = _list(d, "errors", n, path) if "errors" in d else [""] * n
    t0 = min(_num(s, path, f"start_times[{i}]") or 0.0 for i, s in enumerate(starts)) if n else 0.0
    rows = []
    for i in range(n):
        sent = (_num(starts[i], path, f"start_times[{i}]") or 0.0) - t0
        q = 0.0 if closed else _num(queue[i], path, f"queue_times[{i}]", optional=True) or 0.0
        err = errs[i] if isinstance(errs[i], str) else ""
        row: dict[str, Any] = {"request_id": i, "phase": "measure", "intended_at": sent - max(0.0, q), "sent_at": sent,
                               "prompt_tokens": int(ins[i]) if isinstance(ins[i], int) else None}
        ttft = _num(ttfts[i], path, f"ttfts[{i}]", optional=True)
        if err or not ttft:
            row |= {"outcome": "error", "error_class": error_class(err or "failed"),
                    "error_detail": f"vllm bench: {err or 'request failed'}"[:300],
                    "ended_at": sent + (_num(lat[i], path, f"latencies[{i}]", optional=True) or 0.0)}
            rows.append(row)
            continue
        gaps = itls[i] if isinstance(itls[i], list) else []
        first = sent + ttft
        times = [first]
        for j, g in enumerate(gaps):
            times.append(times[-1] + (_num(g, path, f"itls[{i}][{j}]") or 0.0))
        latency = _num(lat[i], path, f"latencies[{i}]", optional=True)
        n_out = outs[i] if isinstance(outs[i], int) else len(times)
        row |= {"outcome": "ok", "first_token_at": first, "first_answer_at": first, "chunk_times": times,
                "chunk_tokens": [1] * len(times), "ended_at": sent + latency if latency else times[-1],
                "completion_tokens": n_out, "stream_tokens": len(times), "usage_source": "server",
                "http_status": 200}
        rows.append(row)
    return rows


# -- GuideLLM -----------------------------------------------------------------------------------------
def read_guidellm(d: Any, path: Path) -> list[Imported]:
    if not isinstance(d, dict) or not isinstance(d.get("benchmarks"), list) or not d["benchmarks"]:
        raise bad(path, "benchmarks", "expected a non-empty list of benchmarks")
    version = (d.get("metadata") or {}).get("guidellm_version")
    out = []
    for k, b in enumerate(d["benchmarks"]):
        where = f"benchmarks[{k}]"
        if not isinstance(b, dict) or not isinstance(b.get("requests"), dict):
            raise bad(path, f"{where}.requests", "missing (GuideLLM wrote no per-request statistics)")
        strat = ((b.get("config") or {}).get("strategy") or {})
        kind, rate = strat.get("type_"), strat.get("rate")
        backend = (b.get("config") or {}).get("backend") or {}
        imp = Imported(tool="guidellm", version=version if isinstance(version, str) else None,
                       path=path if len(d["benchmarks"]) == 1 else Path(f"{path}[{k}]"),
                       model=backend.get("model") if isinstance(backend.get("model"), str) else None,
                       started_at=_iso(b.get("start_time")),
                       load=_rate_load(f"GuideLLM {kind}", rate if kind in ("poisson", "constant") else math.inf))
        streams = _streams(1 if kind == "synchronous" else strat.get("streams") if kind == "concurrent" else None)
        if streams:
            imp.load["concurrency"] = streams
        rows: list[dict[str, Any]] = []
        for status, outcome in (("successful", "ok"), ("errored", "error"), ("incomplete", "cancelled")):
            for i, r in enumerate(b["requests"].get(status) or []):
                rows.append(_guidellm_row(r, outcome, path, f"{where}.requests.{status}[{i}]"))
        t0 = min((r["sent_at"] for r in rows if r["sent_at"] is not None), default=0.0)
        for i, r in enumerate(rows):
            r["request_id"] = i
            for key in ("intended_at", "sent_at", "first_token_at", "first_answer_at", "ended_at"):
                if r.get(key) is not None:
                    r[key] -= t0
        imp.rows = rows
        imp.extra = {"guidellm_metrics_mean": {m: ((b.get("metrics") or {}).get(m) or {}).get("successful", {}).get("mean")
                                               for m in ("requests_per_second", "output_tokens_per_second",
                                                         "time_per_output_token_ms", "inter_token_latency_ms")}}
        out.append(imp)
    return out


def _iso(ts: Any) -> str | None:
    if isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts > 0:
        return datetime.fromtimestamp(float(ts)).astimezone().isoformat()
    return None


def _guidellm_row(r: Any, outcome: str, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(r, dict) or not isinstance(r.get("info"), dict):
        raise bad(path, f"{where}.info", "missing")
    t = r["info"].get("timings")
    if not isinstance(t, dict):
        raise bad(path, f"{where}.info.timings", "missing")
    sent = _num(t.get("request_start"), path, f"{where}.info.timings.request_start")
    target = t.get("targeted_start")
    # targeted_start is the schedule's time; GuideLLM 0.8 writes a relative value for the first request
    intended = float(target) if isinstance(target, (int, float)) and sent is not None and 0 <= sent - target < 60 else sent
    first = _num(t.get("first_token_iteration"), path, f"{where}.info.timings.first_token_iteration", optional=True)
    end = t.get("last_request_iteration") or t.get("request_end")
    row: dict[str, Any] = {"phase": "measure", "intended_at": intended, "sent_at": sent, "first_token_at": first,
                           "first_answer_at": t.get("first_output_token_iteration") or first,
                           "ended_at": _num(end, path, f"{where}.info.timings.request_end", optional=True),
                           "prompt_tokens": r.get("prompt_tokens"), "completion_tokens": r.get("output_tokens"),
                           "stream_tokens": int(t.get("token_iterations") or 0), "outcome": outcome,
                           "usage_source": "server" if outcome == "ok" else None, "chunk_times": [], "chunk_tokens": []}
    if outcome == "error":
        text = str(r["info"].get("error") or "request failed")
        row |= {"error_class": error_class(text), "error_detail": f"GuideLLM: {text}"[:300]}
    return row


# -- AIPerf -------------------------------------------------------------------------------------------
def read_aiperf(d: Any, path: Path) -> Imported:
    version = None
    if isinstance(d, dict):
        version = d.get("aiperf_version") if isinstance(d.get("aiperf_version"), str) else None
        beside = path.with_name("profile_export.jsonl")
        if beside.exists():
            imp = read_aiperf(_load_json(beside), beside)
            imp.version = version
            imp.command = _aiperf_command(d)
            imp.load = _aiperf_load(d)
            return imp
        return _aiperf_aggregates(d, path, version)
    if not isinstance(d, list):
        raise bad(path, "top level", "expected AIPerf records (JSON lines) or its profile export JSON")
    rows = []
    starts = []
    for i, rec in enumerate(d):
        meta = rec.get("metadata") if isinstance(rec, dict) else None
        if not isinstance(meta, dict):
            raise bad(path, f"line {i + 1}.metadata", "missing")
        _num(meta.get("request_start_ns"), path, f"line {i + 1}.metadata.request_start_ns")
        starts.append(meta["request_start_ns"])  # kept as integers: a float of ~1.8e18 ns is 256 ns coarse
    t0 = min(starts, default=0)
    for i, rec in enumerate(d):
        meta, m = rec["metadata"], rec.get("metrics") or {}
        where = f"line {i + 1}"
        sent = (starts[i] - t0) / 1e9
        credit = meta.get("credit_issued_ns")
        intended = (credit - t0) / 1e9 if isinstance(credit, (int, float)) and credit <= starts[i] else sent

        def val(key: str) -> Any:
            v = m.get(key)
            return v.get("value") if isinstance(v, dict) else None

        row: dict[str, Any] = {"request_id": i, "phase": "warmup" if meta.get("benchmark_phase") == "warmup" else "measure",
                               "intended_at": intended, "sent_at": sent,
                               "prompt_tokens": val("usage_prompt_tokens") or val("input_sequence_length")}
        err = rec.get("error")
        if err or meta.get("was_cancelled"):
            end_ns = meta.get("request_end_ns")
            row |= {"outcome": "cancelled" if not err else "error",
                    "ended_at": (end_ns - t0) / 1e9 if isinstance(end_ns, (int, float)) else None}
            if err:
                text = json.dumps(err) if not isinstance(err, str) else err
                row |= {"error_class": error_class(text), "error_detail": f"AIPerf: {text}"[:300]}
            rows.append(row)
            continue
        ttft = _num(val("time_to_first_token"), path, f"{where}.metrics.time_to_first_token.value")
        latency = _num(val("request_latency"), path, f"{where}.metrics.request_latency.value")
        first = sent + (ttft or 0.0) / 1e3
        times = [first]
        for g in val("inter_chunk_latency") or []:
            times.append(times[-1] + float(g) / 1e3)
        usage_n = val("usage_completion_tokens")
        n_out = usage_n if isinstance(usage_n, int) else val("output_sequence_length")
        ttfo = val("time_to_first_output_token")
        row |= {"outcome": "ok", "first_token_at": first,
                "first_answer_at": sent + float(ttfo) / 1e3 if isinstance(ttfo, (int, float)) else first,
                "chunk_times": times, "chunk_tokens": [1] * len(times), "ended_at": sent + (latency or 0.0) / 1e3,
                "completion_tokens": n_out, "stream_tokens": len(times),
                "usage_source": "server" if isinstance(usage_n, int) else "stream", "http_status": 200}
        rows.append(row)
    return Imported(tool="aiperf", version=version, path=path, rows=rows, load={"describe": "AIPerf profile", "open_loop": False})


def _aiperf_load(d: dict[str, Any]) -> dict[str, Any]:
    """The load of the profiling phase its JSON records (``input_config.phases``): a request rate is an open
    loop at that rate, ``type: concurrency`` a closed loop of that many streams; else an unknown closed loop."""
    phases = (d.get("input_config") or {}).get("phases") if isinstance(d.get("input_config"), dict) else None
    phase = next((p for p in phases if isinstance(p, dict) and p.get("kind") == "profiling"), None) \
        if isinstance(phases, list) else None
    if phase is None:
        return {"describe": "AIPerf profile", "open_loop": False}
    rate, conc = phase.get("rate"), phase.get("concurrency")
    is_rate = isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0
    load = _rate_load(f"AIPerf {phase.get('type')}", rate if is_rate else math.inf,
                      f", concurrency {conc}" if isinstance(conc, int) else "")
    if not is_rate and _streams(conc):
        load["concurrency"] = conc
    return load


def _aiperf_command(d: dict[str, Any]) -> str | None:
    cmd = d.get("cli_command") or (d.get("run_info") or {}).get("cli_command")
    return cmd if isinstance(cmd, str) else None


def _aiperf_aggregates(d: dict[str, Any], path: Path, version: str | None) -> Imported:
    def stat(key: str) -> dict[str, Any]:
        v = d.get(key)
        return v if isinstance(v, dict) else {}

    count = int(stat("request_count").get("avg") or 0)
    if not version and path.suffix.lower() == ".csv":
        version = None
    imp = Imported(tool="aiperf", version=version, path=path, command=_aiperf_command(d), load=_aiperf_load(d))
    imp.copied = {"completed": count, "scheduled": count,
                  "duration_s": stat("benchmark_duration").get("avg"),
                  "request_throughput": stat("request_throughput").get("avg"),
                  "output_token_throughput": stat("output_token_throughput").get("avg"),
                  "input_token_throughput": stat("input_token_throughput").get("avg"),
                  "total_token_throughput": stat("total_token_throughput").get("avg")}
    for ours, theirs in (("ttft_ms", "time_to_first_token"), ("tpot_ms", "inter_token_latency"),
                         ("e2e_ms", "request_latency"), ("itl_ms", "inter_chunk_latency")):
        s = stat(theirs)
        if s:
            imp.copied[ours] = _dist(int(s.get("count") or count), s.get("avg"), s.get("std"), s.get("p50"),
                                     s.get("p90"), s.get("p95"), s.get("p99"), s.get("min"), s.get("max"))
    if imp.copied["duration_s"] is None:
        raise bad(path, "benchmark_duration.avg", "missing")
    imp.copied_definitions = {"tpot_ms": "AIPerf's inter_token_latency: (request_latency - TTFT) / (OSL - 1)",
                              "itl_ms": "AIPerf's inter_chunk_latency: pooled gaps between responses",
                              "e2e_ms": "AIPerf's request_latency: to the last content response",
                              "output_token_throughput": "AIPerf: sum of OSL / benchmark_duration"}
    return imp


# -- inference-benchmarker ----------------------------------------------------------------------------
_IB_DISTS = (("ttft_ms", "time_to_first_token_ms"), ("tpot_ms", "inter_token_latency_ms"), ("e2e_ms", "e2e_latency_ms"))
_IB_DEFINITIONS = {
    "duration_s": "inference-benchmarker duration_ms: the first completed response's start to the last one's end",
    "request_throughput": "inference-benchmarker request_rate: successful requests / its duration",
    "output_token_throughput": "inference-benchmarker token_throughput_secs: generated tokens (the client's "
                               "tokenizer on each content delta) / its duration",
    "input_token_throughput": "total_tokens_sent (the dataset's prompt token counts, successful requests) / its duration",
    "total_token_throughput": "(total_tokens + total_tokens_sent) / its duration",
    "ttft_ms": "inference-benchmarker time_to_first_token_ms: the send to the first non-empty delta.content",
    "tpot_ms": "inference-benchmarker inter_token_latency_ms: per request, (last content delta - first) / "
               "(tokens - 1), percentiles over successful requests (infermeter's TPOT family; its end is the "
               "last content delta, not [DONE])",
    "e2e_ms": "inference-benchmarker e2e_latency_ms: the send to [DONE]",
}


def read_inference_benchmarker(d: Any, path: Path) -> list[Imported]:
    if not isinstance(d, dict) or not isinstance(d.get("results"), list):
        raise bad(path, "results", "expected the list of benchmark results")
    config: dict[str, Any] = d["config"] if isinstance(d.get("config"), dict) else {}
    steps = [(k, r) for k, r in enumerate(d["results"]) if not (isinstance(r, dict) and r.get("id") == "warmup")]
    if not steps:
        raise bad(path, "results", "only the warmup step; nothing measured to import")
    model = config.get("model_name") if isinstance(config.get("model_name"), str) else None
    out = []
    for k, r in steps:
        where = f"results[{k}]"
        if not isinstance(r, dict):
            raise bad(path, where, "expected a JSON object")

        def count(key: str) -> int:
            v = _num(r.get(key), path, f"{where}.{key}")
            return int(v or 0)

        ok, failed, total = count("successful_requests"), count("failed_requests"), count("total_requests")
        duration_ms = _num(r.get("duration_ms"), path, f"{where}.duration_ms") or 0.0
        if duration_ms <= 0:
            raise bad(path, f"{where}.duration_ms", f"expected a positive number, got {r.get('duration_ms')!r}")
        duration = duration_ms / 1e3
        n_out, n_in = count("total_tokens"), count("total_tokens_sent")
        ex: dict[str, Any] = r["config"] if isinstance(r.get("config"), dict) else {}
        kind = r.get("executor_type") if isinstance(r.get("executor_type"), str) else "unknown executor"
        vus = ex.get("max_vus")
        rate = ex.get("rate") if kind == "ConstantArrivalRate" else math.inf
        imp = Imported(tool="inference-benchmarker", version=None, path=path if len(steps) == 1 else Path(f"{path}[{k}]"),
                       model=model, label=f"inference-benchmarker:{r.get('id', k)}",
                       started_at=d.get("start_time") if isinstance(d.get("start_time"), str) else None,
                       load=_rate_load(f"inference-benchmarker {kind}", rate, f", max {vus} VUs" if vus else ""))
        if kind == "ConstantVUs" and isinstance(vus, int):
            imp.load["concurrency"] = vus
        imp.copied = {
            "duration_s": duration, "completed": ok, "failed": failed, "scheduled": total,
            "error_rate": failed / total if total else None,
            "request_throughput": _num(r.get("request_rate"), path, f"{where}.request_rate"),
            "output_token_throughput": _num(r.get("token_throughput_secs"), path, f"{where}.token_throughput_secs"),
            "input_token_throughput": n_in / duration, "total_token_throughput": (n_in + n_out) / duration,
            "total_input_tokens": n_in, "total_output_tokens": n_out,
            "mean_input_tokens": n_in / ok if ok else None, "mean_output_tokens": n_out / ok if ok else None,
        }
        others: dict[str, Any] = {}
        for ours, theirs in _IB_DISTS:
            p = r.get(theirs)
            if not isinstance(p, dict):
                raise bad(path, f"{where}.{theirs}", "missing (expected its p50 ... p99 and avg)")
            for q in ("avg", "p50", "p90", "p95", "p99"):
                _num(p.get(q), path, f"{where}.{theirs}.{q}")
            imp.copied[ours] = _dist(ok, p["avg"], None, p["p50"], p["p90"], p["p95"], p["p99"])
            others[theirs] = {q: p[q] for q in ("p60", "p70", "p80") if isinstance(p.get(q), (int, float))}
        imp.copied_definitions = dict(_IB_DEFINITIONS)
        imp.extra = {"id": r.get("id"), "executor_type": kind, "executor_config": ex, "other_percentiles": others,
                     **{key: config[key] for key in ("run_id", "benchmark_kind", "tokenizer", "prompt_options",
                                                     "decode_options", "meta") if config.get(key) is not None}}
        out.append(imp)
    return out
