"""What cold starts cost and what headroom buys: the autoscaling day of examples/fleet-autoscale.yaml.

Simulates the one-pool day (2 -> 120 req/s in five minutes, a 25-minute peak, a fall) four ways and
prints, per variant, the pool's SLO attainment (each request against the pool's SLO), TTFT/TPOT p99,
scale-ups and -downs, mean ready replicas, the most provisioned, GPU-hours and cost (catalog price):

- headroom 0 and 20 %, with the seed's 60-90 s model load;
- headroom 20 % with a 0 s load (replicas ready at once: the cold start's share of the misses);
- headroom 50 %, 60-90 s load;
- no autoscaling: a fixed fleet of ``--fixed`` replicas (default 6) all day, for scale.

Figures come from the twin (virtual time) and depend only on the seed; the wall time is this machine's.

    .venv/bin/python benchmarks/fleet_autoscale.py [--input-tokens 512] [--output-tokens 256] [--seed 0]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from infermeter.measure.config import RunConfig
from infermeter.measure.multifleet import FleetPlan
from infermeter.twin.fleetfile import load_fleet

EXAMPLE = Path(__file__).parents[1] / "examples" / "fleet-autoscale.yaml"
VARIANTS = [("headroom 0 %, load 60-90 s", 0.0, (60.0, 90.0)), ("headroom 20 %, load 60-90 s", 0.2, (60.0, 90.0)),
            ("headroom 20 %, load 0 s", 0.2, (0.0, 0.0)), ("headroom 50 %, load 60-90 s", 0.5, (60.0, 90.0))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input-tokens", default="512")
    ap.add_argument("--output-tokens", default="256")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixed", type=int, default=6, help="replicas of the fixed fleet")
    args = ap.parse_args()
    base = load_fleet(EXAMPLE)
    p0 = base.pools[0]
    assert p0.autoscale is not None
    print(f"{'variant':30} {'SLO met':>8} {'TTFT p99':>9} {'TPOT p99':>9} {'ups':>4} {'downs':>5} "
          f"{'ready':>6} {'max':>4} {'GPU-h':>6} {'cost $':>7} {'wall s':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        variants = [*VARIANTS, (f"fixed {args.fixed} replicas", None, None)]
        for k, (name, headroom, load) in enumerate(variants):
            if headroom is None:
                pool = p0.model_copy(update={"autoscale": None, "replicas": args.fixed})
            else:
                a = p0.autoscale.model_copy(update={"headroom": headroom, "load_s": load})
                pool = p0.model_copy(update={"autoscale": a})
            fleet = base.model_copy(update={"pools": (pool,)})
            cfg = RunConfig(input_tokens=args.input_tokens, output_tokens=args.output_tokens, seed=args.seed,
                            out=str(Path(tmp) / str(k)), history=False)
            t0 = time.perf_counter()
            p = FleetPlan(cfg, fleet).run().summary["pools"][p0.label]
            au = p.get("autoscale") or {"scale_ups": 0, "scale_downs": 0, "mean_ready": float(args.fixed),
                                        "max_provisioned": args.fixed}
            cost = "–" if p["cost_usd"] is None else f"{p['cost_usd']:.2f}"
            print(f"{name:30} {p['slo_attainment']:8.2%} {p['ttft_ms']['p99']:9,.0f} {p['tpot_ms']['p99']:9.1f} "
                  f"{au['scale_ups']:4d} {au['scale_downs']:5d} {au['mean_ready']:6.2f} {au['max_provisioned']:4d} "
                  f"{p['gpu_hours']:6.2f} {cost:>7} {time.perf_counter() - t0:6.1f}")


if __name__ == "__main__":
    main()
