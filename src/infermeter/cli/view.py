"""Console rendering for runs: the live progress panel and the summary table.

The panel reads ``LiveStats.snapshot()``; the summary table reads a
:class:`~infermeter.analysis.results.Summary` (its attributes, so a renamed figure is a type error),
so the same rendering serves measured and simulated runs and can be tested on fixed input.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from infermeter.analysis import catalog
from infermeter.analysis.results import MIN_SAMPLES, PERCENTILE_LABELS, Summary
from infermeter.cli.fit import Fit, make_table
from infermeter.client.errors import status_of
from infermeter.terminal import safe_text


def _f(v: Any, fmt: str = ".1f") -> str:
    return "–" if v is None else format(v, fmt)


def progress_panel(snap: dict[str, Any], elapsed: float, total: int | None, duration: float | None) -> Table:
    t = Table.grid(padding=(0, 2))
    done = f"{snap['done']}/{total}" if total else str(snap["done"])
    span = f"{elapsed:.0f}/{duration:.0f} s" if duration else f"{elapsed:.0f} s"
    t.add_row(Text("done", style="bold"), done, Text("elapsed", style="bold"), span,
              Text("in flight", style="bold"), str(snap["in_flight"]))
    t.add_row(Text("req/s", style="bold"), _f(snap["req_per_s"], ".2f"), Text("out tok/s", style="bold"),
              _f(snap["out_tok_per_s"], ".0f"), Text("TTFT p50", style="bold"),
              f"{_f(snap['ttft_p50_ms'])} ms", Text("errors", style="bold"),
              Text(str(snap["errors"]), style="red" if snap["errors"] else ""))
    return t


def summary_table(s: Summary, title: str | None = None) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_column(no_wrap=True)
    head.add_column(overflow="fold")
    head.add_column(overflow="fold")
    src = s.source
    head.add_row(Text("run", style="bold"), safe_text(s.label), safe_text(src, "cyan"))  # verbatim, never markup
    if s.load:
        head.add_row(Text("load", style="bold"), safe_text(s.load), "")
    counts = [f"{s.completed} ok", f"{s.failed} failed"]
    counts += [f"{n} {k}" for k, n in (("cancelled", s.cancelled), ("dropped", s.dropped)) if n]
    scheduled = s.scheduled
    head.add_row(Text("requests", style="bold"), ", ".join(counts) + (f" of {scheduled} scheduled" if scheduled else ""),
                 f"in {s.duration_s:.2f} s")
    if s.target_rate:
        head.add_row(Text("rate", style="bold"),
                     f"achieved {_f(s.achieved_rate, '.2f')} of target {s.target_rate:.2f} req/s", "")
    if s.slo:
        bounds = ", ".join(f"{k} <= {v:g}" for k, v in s.slo.items())
        att = s.slo_attainment
        head.add_row(Text("SLO", style="bold"), f"{bounds}: " + ("–" if att is None else
                     f"{att:.1%} of the scheduled requests met every bound"), "")
    if s.token_count_source:
        tok = f"tokens from {s.token_count_source} usage" if s.token_count_source != "stream" else "tokens counted from the stream"
        if s.usage_mismatches:
            tok += f" ({s.usage_mismatches} requests where usage and stream disagree)"
        if s.usage_implausible:
            tok += f" ({s.usage_implausible} implausible usage reports set aside: counted from the stream)"
        head.add_row(Text("tokens", style="bold"), tok, "")
    if s.reasoning_requests:
        head.add_row(Text("reasoning", style="bold"), reasoning_line(s), "")
    figures = [m for m in catalog.metrics("console", block=None) if not m.distribution]
    thr = make_table("Throughput", [(m.console_label or m.label, "num") for m in figures], title_justify="left")
    thr.add_row(*(_f(m.ref().value(s), m.fmt) for m in figures))
    lat = make_table("Latency (ms)", [("metric", "text"), *((PERCENTILE_LABELS.get(k, k), "num")
                                                             for k in catalog.CONSOLE_STATS)], title_justify="left")
    rows = [(m.console_label or m.label, m.key) for m in catalog.metrics("console", block=None) if m.distribution]
    short: dict[str, int] = {}  # percentile -> the fewest samples of a row that could not show it
    for name, key in rows:
        d = s.distribution(key)  # a figure this run did not have (ttfo_ms...) is empty
        if not d.count:
            continue
        lat.add_row(name, *(_f(d[k], ".2f") for k in catalog.CONSOLE_STATS))
        for k, need in MIN_SAMPLES.items():
            if d[k] is None and d.count < need:
                short[k] = min(short.get(k, d.count), d.count)
    parts: list[Any] = [head, Fit(thr, key_columns=0), Fit(lat)]
    if short:
        parts.append(Text("– " + "; ".join(f"{PERCENTILE_LABELS[k]} needs >= {MIN_SAMPLES[k]:,} samples ({n:,} here)"
                                            for k, n in sorted(short.items(), key=lambda kv: MIN_SAMPLES[kv[0]])),
                          style="dim"))
    sm = s.server_metrics or {}
    if sm:
        title = "Engine (simulated)" if src == "simulated" else "Server (scraped /metrics)"
        keys = catalog.metrics("console", block="server_metrics")
        srv = make_table(title, [(m.console_label or m.label, "num") for m in keys], title_justify="left")
        srv.add_row(*(m.ref().format(s, "n/a") for m in keys))
        parts.append(Fit(srv, key_columns=0))
    g = s.gpu or {}
    if g and not g.get("available", True):
        parts.append(Text(f"GPU telemetry: unavailable ({g.get('reason')})", style="dim"))
    elif g:
        bits = [f"{k.replace('_', ' ')} {g[k]:.1f}" for k in ("temperature_c_mean", "temperature_c_max", "power_w_mean")
                if isinstance(g.get(k), (int, float))]
        if isinstance(g.get("throttled_fraction"), (int, float)):
            bits.append(f"throttled {g['throttled_fraction']:.0%} of the time")
        if isinstance(g.get("energy_per_output_token_j"), (int, float)):
            bits.append(f"{g['energy_per_output_token_j']:.3f} J/output token")
        parts.append(Text("GPU: " + (", ".join(bits) or "sampled"), style="cyan"))
    if s.errors:
        parts.append(error_table(s))
    band = interval_line(s)
    if band is not None:
        parts.append(band)
    parts.extend(verdict_lines(s))
    for a in s.alerts:
        parts.append(Text(f"ALERT: {a.get('message') or a.get('alert', a)}", style="bold magenta"))
    return Group(*parts)


def reasoning_line(s: Summary) -> str:
    """How much the requests thought: thinking vs answer tokens (a reasoning run's summary keys)."""
    return (f"{s.reasoning_requests or 0:,} of {s.completed:,} requests thought: "
            f"{_f(s.mean_reasoning_tokens, ',.0f')} thinking + {_f(s.mean_answer_tokens, ',.0f')} answer "
            f"tokens per request ({s.total_reasoning_tokens or 0:,} + {s.total_answer_tokens or 0:,})")


def error_table(s: Summary) -> Fit:
    """Failed requests by class, with the HTTP status and the message most common in each."""
    t = make_table("Errors", [("class", "name"), ("count", "num"), ("status", "num"), ("most common message", "text")],
                   title_justify="left")
    msgs = s.error_messages
    for cls, n in sorted(s.errors.items(), key=lambda kv: -kv[1]):
        msg = str(msgs.get(cls) or "")
        status = status_of(msg)
        t.add_row(safe_text(cls, "red"), str(n), "–" if status is None else str(status), safe_text(msg))
    return Fit(t)


# the banded trio (TTFT p50, TPOT p50, output tok/s): (summary key, name, unit, format), from the catalog
_BANDS = tuple((r.metric.key, r.label.removesuffix(" " + r.metric.unit), r.metric.unit, "{:," + r.metric.fmt + "}")
               for r in catalog.banded())


def interval_line(s: Summary) -> Text | None:
    """A simulated run's predicted figures with their 80% intervals ("TPOT p50 6.96 ms (5.29–8.36)")."""
    pi = s.prediction_intervals or {}
    bits = []
    for key, name, unit, fmt in _BANDS:
        iv = pi.get(key)
        if not iv:
            continue
        v = fmt.format(iv["value"])
        bits.append(f"{name} {v} {unit} ({fmt.format(iv['lo'])}–{fmt.format(iv['hi'])})" if "lo" in iv
                    else f"{name} {v} {unit} (no interval: {str(iv.get('why', '')).split(':')[0]})")
    if not bits:
        return None
    return Text("predicted, 80% intervals from the model's out-of-sample errors: " + " · ".join(bits), style="cyan")


def verdict_lines(s: Summary) -> list[Text]:
    """The verdict as the console shows it: valid or not, saturated or not, then each warning."""
    out: list[Text] = []
    if s.valid:
        out.append(Text("valid: yes", style="green"))
    else:
        out.append(Text("INVALID: " + "; ".join(s.invalid_reasons), style="bold red"))
    sat = s.saturation
    if s.saturated:
        out.append(Text("SATURATED: the server could not keep up with the offered load: "
                        + "; ".join(sat.evidence) + ". Latency percentiles grow with the run's length "
                        "and describe no steady state; the throughput is the server's capacity.", style="bold red"))
    elif s.saturated is False and sat.offered_rate:
        out.append(Text(f"saturated: no (completed {_f(sat.completion_rate, '.3g')} of "
                        f"{_f(sat.offered_rate, '.3g')} req/s offered; TTFT did not grow through the run)",
                        style="green"))
    elif s.saturated is None and sat.basis.startswith("not judged"):
        out.append(Text(f"saturated: {sat.basis}", style="dim"))
    for w in s.warnings:
        if not str(w).startswith("saturated:"):
            out.append(Text("warning: " + w, style="yellow"))
    return out


def target_line(emu: dict[str, Any]) -> str:
    """One readable line naming what an emulated target emulates."""
    if emu.get("backend") == "twin":
        hw = str(emu.get("hardware") or "?")
        kv = emu.get("kv_capacity_tokens")
        return (f"digital twin of vLLM serving {emu.get('model')} ({emu.get('dtype', 'bf16')}) on {hw}: "
                f"max_num_seqs {emu.get('max_num_seqs')}, max_num_batched_tokens {emu.get('max_num_batched_tokens')}, "
                f"KV cache {kv:,} tokens" + (f", prefix caching {'on' if emu.get('enable_prefix_caching') else 'off'}")
                + (f", speedup {emu['speedup']:g}x" if emu.get("speedup", 1) != 1 else "")) if kv else f"digital twin: {emu}"
    if emu.get("backend") == "simple":
        if not emu.get("ttft_s") and not emu.get("itl_s"):
            return "zero-delay emulator (client capacity mode)"
        return (f"simple timing model: TTFT {emu['ttft_s'] * 1000:g} ms, {emu['itl_s'] * 1000:g} ms/token, "
                f"max {emu['max_concurrency']} concurrent")
    return ", ".join(f"{k}={v}" for k, v in emu.items() if not isinstance(v, dict))
