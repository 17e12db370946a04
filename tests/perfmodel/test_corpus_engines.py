"""The corpus covers the engines users run: vLLM on NVIDIA GPUs, SGLang and LMDeploy, each row with its provenance.

Read through :mod:`infermeter.perfmodel.corpus` (the loader the validation uses), not as raw text; the
aside file (rows the model cannot represent yet, docs/performance-model.md section 8) has the same schema.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from infermeter.errors import ConfigError, DataError
from infermeter.perfmodel.api import build_deployment
from infermeter.perfmodel.calibration import load_calibration
from infermeter.perfmodel.corpus import load_rows, publication
from infermeter.perfmodel.hardware import get_hardware
from infermeter.perfmodel.validate import deployment_for, predict

DATA = Path(__file__).resolve().parents[1] / "data"
NVIDIA = ("hopper", "ampere", "ada", "blackwell")


def _documented(row) -> bool:
    return (row.source_url.startswith("https://") and ((row.date[:4].isdigit() and len(row.date) >= 7) or "date not stated" in row.conditions)
            and bool(row.conditions) and (bool(row.engine_version) or "version not stated" in row.conditions))


def test_vllm_runs_on_nvidia_hardware_from_more_than_one_publication(corpus):
    rows = [r for r in corpus if r.engine == "vllm" and get_hardware(r.hardware).family in NVIDIA]
    assert len(rows) >= 10
    assert all(_documented(r) for r in rows), [r.id for r in rows if not _documented(r)]
    assert len({publication(r) for r in rows}) >= 3
    # both vLLM engine generations are represented: V0 (< 0.8) and V1
    gens = {deployment_for(r, load_calibration()).engine_defaults.generation for r in rows}
    assert {"vllm<0.8", ""} <= gens


def test_sglang_and_lmdeploy_rows_carry_their_provenance(corpus):
    sglang = [r for r in corpus if r.engine == "sglang"]
    assert len(sglang) >= 5 and all(_documented(r) for r in sglang), [r.id for r in sglang if not _documented(r)]
    assert len({publication(r) for r in sglang}) >= 2
    lmdeploy = [r for r in corpus if r.engine == "lmdeploy"]
    assert lmdeploy and all(_documented(r) for r in lmdeploy)
    # every such row is predicted under its own engine's defaults (an unknown engine would be a DataError)
    for r in sglang[:2] + lmdeploy[:2]:
        d = deployment_for(r, load_calibration())
        assert d.engine_defaults.name == r.engine and predict(r) > 0


def test_mean_length_rows_say_so(corpus):
    """Rows from length distributions (ShareGPT, SGLang's random range) carry the means, and their conditions say it."""
    for r in corpus:
        if "sharegpt" in r.id or "random_range_ratio 0.0" in r.conditions:
            assert "mean" in r.conditions, r.id


def test_aside_file_has_the_corpus_schema_and_no_corpus_row():
    aside = load_rows(DATA / "published-measurements-aside.csv")
    main = {r.id for r in load_rows(DATA / "published-measurements.csv")}
    assert aside and not {r.id for r in aside} & main
    assert all(_documented(r) for r in aside)


def test_a_vllm_row_that_states_vllm_use_v1_0_runs_the_v0_engine_whatever_its_version(corpus):
    """vLLM 0.8-0.10 still shipped V0 behind ``VLLM_USE_V1=0`` (the Azure MI300X handbook of blind set 6 ran it with
    300 users): the row's setting selects V0's generation, so its scheduler limits are V0's 256 sequences, not V1's
    1024 on a large GPU, and users beyond them queue for a whole request."""
    v0 = [r for r in corpus if r.setting("vllm_use_v1") == 0]
    # each says why: the run set VLLM_USE_V1=0, or its server log shows V0 starting ("Initializing a V0 LLM engine")
    assert v0 and all(r.engine == "vllm" and ("VLLM_USE_V1=0" in r.conditions or "a V0 LLM engine" in r.conditions) for r in v0)
    row = next(r for r in v0 if r.metric == "ttft_ms" and (r.concurrency or 0) > 256)
    cal = load_calibration()
    d = deployment_for(row, cal)
    assert row.engine_spec.endswith("+v0") and d.engine_defaults.generation == "vllm<0.8"
    assert d.engine_defaults.max_num_seqs == 256
    as_v1 = deployment_for(replace(row, settings=tuple(kv for kv in row.settings if kv[0] != "vllm_use_v1")), cal)
    assert as_v1.engine_defaults.generation == "" and as_v1.engine_defaults.max_num_seqs == 1024
    # 300 users on 256 slots: a first token waits for a slot (a whole request), where V1's limit would admit them all at
    # once (its equal lengths in step: cohorts of 156 prompts wait for their 65,536-token prefill, not for a request)
    v1 = predict(replace(row, settings=tuple(kv for kv in row.settings if kv[0] != "vllm_use_v1")))
    assert predict(row) > 2 * v1 and predict(row) - v1 > 5000


def test_plan_names_the_v0_engine_by_label_and_refuses_a_label_it_cannot_apply(tmp_path):
    """``--engine vllm@0.8.5+v0`` plans V0 (256 sequences on an MI300X, where V1 takes 1024); ``+v1`` on a 0.7 version
    is V1's alpha, not V0; a ``v0`` label on another engine, or ``vllm_use_v1`` on a non-vLLM row, is an error naming it."""
    assert build_deployment("llama-3.1-8b", "mi300x", engine="vllm@0.8.5+v0").engine_defaults.max_num_seqs == 256
    assert build_deployment("llama-3.1-8b", "mi300x", engine="vllm@0.8.5").engine_defaults.max_num_seqs == 1024
    assert build_deployment("llama-3.1-8b", "h100-sxm", engine="vllm@0.7.3+v1").engine_defaults.generation == ""
    assert build_deployment("llama-3.1-8b", "h100-sxm", engine="vllm@0.7.3").engine_defaults.generation == "vllm<0.8"
    with pytest.raises(ConfigError, match="names a vLLM engine generation; sglang has none"):
        build_deployment("llama-3.1-8b", "h100-sxm", engine="sglang@0.4.0+v0")
    head = (DATA / "published-measurements.csv").read_text().splitlines()[0]
    f = tmp_path / "m.csv"
    f.write_text(head + "\nx,llama-3.1-8b,h100-sxm,1,1,1,bf16,sglang,saturated,max,128,128,ttft_ms,5,src,,,,,,vllm_use_v1=0\n")
    with pytest.raises(DataError, match="m.csv:2: column 'settings' item vllm_use_v1=0: 0 or 1, on a vllm row only"):
        load_rows(f)


def test_eager_rows_say_so_and_pay_a_launch_cost_per_decode_step(corpus):
    """A row with ``enforce_eager=1`` states a run without graphs in its conditions, and every vLLM or SGLang row whose
    conditions say the run turned them off carries the setting. Its prediction charges each layer's launches to every
    step a captured graph would have replayed in one launch (up to 512 new tokens: decode, verification, small prompt
    chunks) and nothing more to a larger step, which runs without graphs either way; other engines, CPUs and vLLM
    before graphs existed refuse the setting."""
    eager = [r for r in corpus if r.setting("enforce_eager") == 1]
    assert len({publication(r) for r in eager}) >= 3 and {r.engine for r in eager} == {"vllm", "sglang"}
    said = EAGER_SAID
    assert all(said.search(r.conditions) for r in eager), [r.id for r in eager if not said.search(r.conditions)]
    unmarked = [r.id for r in corpus if r.engine in ("vllm", "sglang") and said.search(r.conditions)
                and r.setting("enforce_eager") != 1]
    assert not unmarked, unmarked
    cal = load_calibration()
    for r in eager[:2] + [r for r in eager if r.engine == "sglang"][:1]:
        d = deployment_for(r, cal)
        graphs = deployment_for(replace(r, settings=tuple(kv for kv in r.settings if kv[0] != "enforce_eager")), cal)
        assert d.enforce_eager and not graphs.enforce_eager and d.layer_overhead_us > 0 and graphs.layer_overhead_us == 0
        launches = d.spec.layers * d.layer_overhead_us * 1e-6
        assert d.step_time(1, 1000, 1) - graphs.step_time(1, 1000, 1) == pytest.approx(launches)
        assert d.step_time(8, 8000, 8) - graphs.step_time(8, 8000, 8) == pytest.approx(launches)
        assert d.step_time(512, 512, 1) - graphs.step_time(512, 512, 1) == pytest.approx(launches)
        assert d.step_time(513, 513, 1) == pytest.approx(graphs.step_time(513, 513, 1))  # past the capture size: no more
        assert d.prefill_time(2048) == pytest.approx(graphs.prefill_time(2048))
        # the plan's bound and shares (Deployment.breakdown) count the launches where the step time does
        over = {t: d.breakdown(t, t, 1)["overhead"] - graphs.breakdown(t, t, 1)["overhead"] for t in (512, 513)}
        assert over[512] == pytest.approx(launches) and over[513] == pytest.approx(0.0)
        assert any("eager execution" in n for n in d.notes)
    for engine, gpu, match in (("trtllm", "a100-80gb", "trtllm.*no graph capture"), ("vllm", "cpu-epyc-9654", "not a GPU"),
                               ("vllm@0.2.0", "a100-80gb", "predates graph capture")):
        with pytest.raises(ConfigError, match=match):
            build_deployment("llama-2-7b", gpu, engine=engine, enforce_eager=True)


# what a run without graphs is called in conditions (vLLM's flag or config key set true, SGLang's flag, prose), not where
# it is negated ("no --enforce-eager stated", "enforce_eager=False")
EAGER_SAID = re.compile(r"(?<!no )(--enforce-eager(?!=False)|enforce[_-]eager[=: ]+(True|true|1)\b|--disable-cuda-graphs?\b|"
                        r"cuda ?graphs? (off|disabled)|eager mode)")


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("published-measurements-blind*.csv")))
def test_blind_rows_run_without_graphs_say_so_in_their_settings(name):
    """The check above, on every blind file that `plan --validate` scores: a vLLM or SGLang row whose conditions say
    the run turned graphs off carries ``enforce_eager=1`` (or it would be predicted as a graph-mode run). A blind file
    stays as it was scored, before the setting existed: its rows that joined the corpus carry the setting there."""
    folded = {r.id for r in load_rows(DATA / "published-measurements.csv")}
    rows = [r for r in load_rows(DATA / name) if r.id not in folded]
    assert not [r.id for r in rows if r.engine in ("vllm", "sglang") and EAGER_SAID.search(r.conditions)
                and r.setting("enforce_eager") != 1]
    assert EAGER_SAID.search("run with --enforce-eager") and EAGER_SAID.search("enforce_eager=True")
    assert not EAGER_SAID.search("no --enforce-eager stated") and not EAGER_SAID.search("enforce_eager=False (graphs)")


def test_an_enforce_eager_setting_on_an_engine_without_graphs_names_the_row(tmp_path):
    head = (DATA / "published-measurements.csv").read_text().splitlines()[0]
    row = "x1,llama-2-7b,a100-80gb,1,1,1,fp16,trtllm,static_batch,1,128,128,output_tokens_per_s,50,,,,,,,enforce_eager=1"
    (tmp_path / "m.csv").write_text(head + "\n" + row + "\n")
    with pytest.raises(DataError, match=r"m\.csv:2: column .settings. item enforce_eager=1: 0 or 1, on a vllm or sglang row only"):
        load_rows(tmp_path / "m.csv")


def test_an_output_cap_below_the_rows_mean_output_names_the_row(tmp_path):
    head = (DATA / "published-measurements.csv").read_text().splitlines()[0]
    ok = "x1,llama-2-7b,a100-80gb,1,1,1,fp16,vllm,fixed_concurrency,8,200,500,output_tokens_per_s,50,,,,,,,lengths=sharegpt; max_output=500"
    bad = ok.replace("x1,", "x2,").replace("max_output=500", "max_output=499")
    (tmp_path / "m.csv").write_text(head + "\n" + ok + "\n" + bad + "\n")
    with pytest.raises(DataError, match=r"m\.csv:3: column .settings. item max_output=499: the output cap must be >= the row's "
                                        r"mean output_tokens 500"):
        load_rows(tmp_path / "m.csv")
    (tmp_path / "m.csv").write_text(head + "\n" + ok.replace("lengths=sharegpt", "lengths=fixed") + "\n")
    with pytest.raises(DataError, match=r"m\.csv:2: column .settings. item max_output=500: equal lengths have no tail to cap"):
        load_rows(tmp_path / "m.csv")
    (tmp_path / "m.csv").write_text(head + "\n" + ok + "\n")
    assert load_rows(tmp_path / "m.csv")[0].setting("max_output") == 500


def test_a_network_setting_names_a_catalog_network_and_reaches_the_prediction(tmp_path):
    from infermeter.perfmodel.calibration import load_calibration
    from infermeter.perfmodel.validate import deployment_for

    head = (DATA / "published-measurements.csv").read_text().splitlines()[0]
    row = "x1,deepseek-v3,h200,16,16,1,fp8,sglang,fixed_concurrency,8,1024,512,output_tokens_per_s,250,,,,,,,network=roce-400"
    (tmp_path / "m.csv").write_text(head + "\n" + row + "\n" + row.replace("x1,", "x2,").replace("roce-400", "ib-ndr401") + "\n")
    with pytest.raises(DataError, match=r"m\.csv:3: column .settings. item network=ib-ndr401: unknown; use one of ib-ndr400"):
        load_rows(tmp_path / "m.csv")
    (tmp_path / "m.csv").write_text(head + "\n" + row + "\n" + row.replace("x1,", "x2,").replace("network=roce-400", "") + "\n")
    roce, default = (deployment_for(r, load_calibration()) for r in load_rows(tmp_path / "m.csv"))
    assert (roce.network, default.network) == ("roce-400", "ib-ndr400")
    assert roce._comm_step > default._comm_step  # RoCE's 10 us against InfiniBand's 5, four times a step's all-reduce
