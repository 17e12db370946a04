"""--ray on a local two-node Ray cluster: actors spread over the nodes, records merged onto one timeline."""

import asyncio
import json

import pyarrow.parquet as pq
import pytest

from infermeter.measure import Measurement, RunConfig

ray = pytest.importorskip("ray", reason="Ray is not installed (extra 'distributed')")


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    c.add_node(num_cpus=2)
    try:
        yield c
    finally:
        c.shutdown()


def test_ray_workers_on_two_nodes_merge_onto_one_timeline(cluster, emulator, tmp_path):
    res = asyncio.run(Measurement(RunConfig(url=emulator.base_url, ray=cluster.address, workers=3, rate=60,
                                            arrival="constant", requests=90, output_tokens="3", scrape=False,
                                            calibrate=False, out=str(tmp_path / "r"))).run())
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    workers = run["runtime"]["workers"]
    assert len({w["node_id"] for w in workers}) == 2  # SPREAD put actors on both nodes
    for w in workers:  # one machine: the clocks agree to within the round trip
        assert abs(w["clock_offset_s"]) <= w["clock_rtt_s"] / 2 + 0.002
    assert run["runtime"]["merge"] == {"records": 90, "per_worker": [30, 30, 30], "duplicates": 0, "missing": 0}
    t = pq.read_table(tmp_path / "r" / "requests.parquet")
    ids = t.column("request_id").to_numpy()
    assert ids.tolist() == list(range(90)) and (t.column("worker").to_numpy() == ids % 3).all()
    assert t.column("intended_at").to_numpy() == pytest.approx(ids / 60, abs=1e-9)
    lag = t.column("sent_at").to_numpy() - t.column("intended_at").to_numpy()
    assert lag.min() >= 0  # never before its time; how late is the machine's load, which the verdict judges:
    assert res.summary["completed"] == 90
    # a loaded machine may make the client late; then the verdict says so, by the lag and by the send
    # rate it caused (both findings of one cause), and by nothing else
    reasons = res.summary["invalid_reasons"]
    assert res.summary["valid"] or (any(r.startswith("schedule_lag") for r in reasons)
                                    and all(r.startswith(("schedule_lag", "achieved_rate")) for r in reasons)), reasons
    assert run["load"]["backend"] == "ray"
