"""How fast the twin simulates production traffic on a whole fleet, and in how much memory (issue 16).

Four cases (all figures printed; this is a benchmark, not a timed test):

(a) 72 h of 48 req/s Poisson traffic, 32 prompt / 32 output tokens, Llama 3.1 70B on one
    4xA100-80GB TP4 replica (12.4 M requests);
(b) 72 h of 48 req/s of the ``chat`` profile on a 4xA100-80GB TP4 fleet sized for a p95 TTFT
    <= 500 ms SLO, as a study sizes its soak: the SLO capacity of one replica (the study's sweep
    of that cell) at 20 % headroom; one simulation process (and the feeder process);
(c) the same as (b) split over 2 worker processes (``--workers 2``);
(d) the sweeps of a 12-cell study (``infermeter study --example``: 4 GPUs x 3 profiles).

    .venv/bin/python benchmarks/simulate_scale.py                 # everything (about half an hour here)
    .venv/bin/python benchmarks/simulate_scale.py --case a --hours 1
    .venv/bin/python benchmarks/simulate_scale.py --case b,c --router session
    make fast && PYTHONPATH=.fast .venv/bin/python benchmarks/simulate_scale.py   # the compiled twin

Per case: wall time, CPU seconds of this process and of its helper processes, simulated requests
per wall second and per CPU second, the peak resident memory of the whole process tree (sampled
each second, summed over processes) and the machine's load average while it ran (this 2-core
machine is shared: compare ratios within one run). The targets of issue 16 are checked at the end.
Reference: before issue 16, a 2 h chat soak over 201 replicas ran at about 300 simulated requests
per second on one core (1,155 s).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BEFORE_FLEET_REQ_PER_CPU_S = 300.0  # the figure: 2 h, 48 req/s, 201 replicas in 1,155 s on one core
RATE = 48.0


class TreeSampler:
    """Peak summed RSS of this process and its descendants, and the mean 1-minute load, once a second."""

    def __init__(self) -> None:
        self.peak_mib = 0.0
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.peak_mib = max(self.peak_mib, tree_rss_mib(os.getpid()))
            self.loads.append(os.getloadavg()[0])

    @property
    def load(self) -> float:
        return sum(self.loads) / len(self.loads) if self.loads else os.getloadavg()[0]


def tree_rss_mib(root: int) -> float:
    parents: dict[int, int] = {}
    rss: dict[int, float] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/statm") as f:
                rss[int(d)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except (OSError, ValueError, IndexError):
            continue
    total = 0.0
    for pid, r in rss.items():
        p = pid
        while p and p != root:
            p = parents.get(p, 0)
        if p == root:
            total += r
    return total


def cpu_s() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def measure(name: str, run: Any) -> dict[str, Any]:
    c_self, c_kids = cpu_s()
    with TreeSampler() as sampler:
        w0 = time.perf_counter()
        res = run()
        wall = time.perf_counter() - w0
    c_self2, c_kids2 = cpu_s()
    out = {"name": name, "wall_s": wall, "cpu_self_s": c_self2 - c_self, "cpu_helpers_s": c_kids2 - c_kids,
           "peak_mib": sampler.peak_mib, "load": sampler.load, "res": res}
    out["cpu_s"] = out["cpu_self_s"] + out["cpu_helpers_s"]
    return out


def simulate_case(name: str, *, hours: float, gpu: str, workers: int, router: str, out: Path,
                  **workload: Any) -> dict[str, Any]:
    from infermeter.measure import RunConfig
    from infermeter.measure.simplan import SimPlan
    from infermeter.twin.spec import TwinSpec

    cfg = RunConfig(model="llama-3.1-70b", rate=RATE, arrival="poisson", duration_s=hours * 3600.0, seed=0,
                    out=str(out / name), label=f"simulate-scale-{name}", workers=workers, **workload)
    # per-token times are not stored, as for any run of more than 100,000 requests (--token-times auto)
    plan = SimPlan(cfg, TwinSpec(model="llama-3.1-70b", gpu=gpu, router=router), token_times="off")
    twin = plan.twin
    print(f"\n({name}) {hours:g} h at {RATE:g} req/s (~{RATE * hours * 3600 / 1e6:.2f} M requests) of "
          f"{workload.get('profile') or 'synthetic ' + str(workload.get('input_tokens')) + '/' + str(workload.get('output_tokens'))}"
          f" on {twin.hardware} ({twin.replicas} replica(s), router {twin.router}), "
          f"{'one simulation process' if workers == 1 else f'{workers} worker processes'}", flush=True)
    m = measure(name, lambda: plan.run(progress=plan.eta(lambda line: print(line, flush=True))))
    res = m["res"]
    m["records"] = res.records
    s = res.summary
    sm = s.get("server_metrics") or {}
    print(f"  requests simulated : {res.records:,} ({res.virtual_s / 3600:.1f} h virtual; "
          f"{s.get('cancelled', 0):,} cancelled at the end)")
    print(f"  wall time          : {m['wall_s']:.1f} s  ({res.records / m['wall_s']:,.0f} requests/s)")
    print(f"  cpu time           : {m['cpu_self_s']:.1f} s this process + {m['cpu_helpers_s']:.1f} s helpers "
          f"= {m['cpu_s']:.1f} s ({res.records / m['cpu_s']:,.0f} requests per CPU-second)")
    print(f"  per request        : {1e6 * m['wall_s'] / res.records:.2f} us wall, "
          f"{1e6 * m['cpu_self_s'] / res.records:.2f} us CPU in this process")
    print(f"  peak memory        : {m['peak_mib']:.0f} MiB (process tree, summed)")
    print(f"  machine load       : {m['load']:.1f} (1-min load average while it ran, 2 cores)")
    ttft, tpot = s.get("ttft_ms") or {}, s.get("tpot_ms") or {}
    hit = sm.get("prefix_cache_hit_rate")
    print(f"  summary            : {s['request_throughput']:.2f} req/s, TTFT p50 {ttft.get('p50') or 0:.0f} ms "
          f"p95 {ttft.get('p95') or 0:.0f} ms, TPOT p50 {tpot.get('p50') or 0:.1f} ms, prefix hits "
          f"{(hit or 0):.1%}, KV usage mean {100 * (sm.get('kv_cache_usage_mean') or 0):.1f}% "
          f"({'saturated' if s.get('saturated') else 'not saturated'})", flush=True)
    return m


def build() -> str:
    """Which build of the twin runs: compiled with mypyc (setup.py, ``make fast``) or pure Python."""
    import infermeter.twin.engine as engine

    if engine.__file__.endswith(".py"):
        return "pure Python (for the compiled build: make fast, then PYTHONPATH=.fast)"
    return f"compiled with mypyc ({Path(engine.__file__).parent.parent.parent})"


def size_fleet(out: Path) -> tuple[str, int, str, float]:
    """(fleet, replicas, why, seconds): one 4xA100 TP4 replica's chat SLO capacity, sized as a study sizes a soak."""
    from infermeter.study.config import build_study
    from infermeter.study.runner import run_cells
    from infermeter.study.soak import soak_fleet

    study = build_study({"model": "llama-3.1-70b", "configurations": ["4xa100-80gb:tp4"], "profiles": ["chat"],
                         "slo": {"ttft_ms": 500, "percentile": "p95"}}, "benchmark")
    t0 = time.perf_counter()
    cells, _ = run_cells(study, out / "sizing")
    fleet, n, why = soak_fleet(study.configurations[0], cells[0], RATE, "auto", study.volume.headroom)
    return fleet, n, why, time.perf_counter() - t0


def study_case(out: Path) -> dict[str, Any]:
    from infermeter.study.config import example_text, load_study_text
    from infermeter.study.runner import run_cells

    study = load_study_text(example_text(), "study --example")
    n = sum(len(study.profiles_for(c)) for c in study.configurations)
    print(f"\n(d) the sweeps of the {n}-cell example study ({', '.join(c.label for c in study.configurations)} x "
          f"{', '.join(study.profiles)})", flush=True)
    m = measure("d", lambda: run_cells(study, out / "study"))
    cells, _ = m["res"]
    steps = sum(len(c.steps) for c in cells)
    print(f"  cells / steps      : {len(cells)} / {steps}")
    print(f"  wall time          : {m['wall_s']:.1f} s  (cpu {m['cpu_s']:.1f} s)")
    print(f"  peak memory        : {m['peak_mib']:.0f} MiB; machine load {m['load']:.1f}", flush=True)
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="a,b,c,d", help="cases to run, comma-separated (default all: a,b,c,d)")
    ap.add_argument("--hours", type=float, default=72.0, help="virtual hours of cases a-c (default 72)")
    ap.add_argument("--router", default="round-robin", help="router of the fleet in b and c (default round-robin)")
    ap.add_argument("--replicas", type=int, default=None, help="fleet size for b and c (default: sized for the SLO)")
    ap.add_argument("--out", type=Path, default=None, help="keep the run directories here (default: a temp dir)")
    args = ap.parse_args()
    cases = {c.strip() for c in args.case.split(",")}
    tmp = None
    out = args.out
    if out is None:
        tmp = Path(tempfile.mkdtemp(prefix="infermeter-scale-"))
        out = tmp
    out.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} cores; load average now {os.getloadavg()[0]:.1f}; the twin: {build()}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    try:
        if "a" in cases:
            results["a"] = simulate_case("a", hours=args.hours, gpu="4xa100-80gb:tp4", workers=1,
                                         router="round-robin", out=out, input_tokens="32", output_tokens="32")
        if cases & {"b", "c"}:
            if args.replicas:
                n, why, sizing_s = args.replicas, "given with --replicas", 0.0
                fleet = f"{4 * n}xa100-80gb:tp4"
            else:
                fleet, n, why, sizing_s = size_fleet(out)
            print(f"\nfleet for (b) and (c): {fleet} = {n} replicas ({why}; sized in {sizing_s:.1f} s)", flush=True)
            for name, workers in (("b", 1), ("c", 2)):
                if name in cases:
                    results[name] = simulate_case(name, hours=args.hours, gpu=fleet, workers=workers,
                                                  router=args.router, out=out, profile="chat")
        if "d" in cases:
            results["d"] = study_case(out)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    report(results, args.hours)
    return 0


def report(r: dict[str, dict[str, Any]], hours: float) -> None:
    print("\ntargets (issue 16, this 2-core machine):")
    scale = 72.0 / hours

    def line(ok: bool, text: str) -> None:
        print(f"  [{'met' if ok else 'MISSED'}] {text}")

    if "a" in r:
        est = r["a"]["wall_s"] * scale
        line(est <= 120, f"(a) 72 h on one replica in <= 120 s: {r['a']['wall_s']:.0f} s"
             + (f" (x{scale:g} = {est:.0f} s for 72 h)" if scale != 1 else ""))
    if "c" in r:
        est = r["c"]["wall_s"] * scale
        line(est <= 600, f"(c) the chat fleet on 2 processes in <= 10 min: {r['c']['wall_s']:.0f} s"
             + (f" (x{scale:g} = {est:.0f} s)" if scale != 1 else ""))
    if "b" in r and "c" in r:
        ratio = r["b"]["wall_s"] / r["c"]["wall_s"]
        line(ratio <= 1.8, f"(b) on 1 simulation process within 1.8x of (c): {ratio:.2f}x")
    for k in ("b", "c"):
        if k in r:
            per_cpu = r[k]["records"] / r[k]["cpu_s"]
            line(per_cpu >= 10 * BEFORE_FLEET_REQ_PER_CPU_S,
                 f"({k}) simulated requests per CPU-second >= 10x the fleet figure before "
                 f"({BEFORE_FLEET_REQ_PER_CPU_S:.0f}): {per_cpu:,.0f} ({per_cpu / BEFORE_FLEET_REQ_PER_CPU_S:.0f}x)")
            if k == "b":  # the memory target is (b)'s; (c)'s figure is printed above, for comparison
                line(r[k]["peak_mib"] <= 1024, f"({k}) peak memory <= 1 GiB: {r[k]['peak_mib']:.0f} MiB")
    if "d" in r:
        print(f"  (d) 12-cell study sweeps: {r['d']['wall_s']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
