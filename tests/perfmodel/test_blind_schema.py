"""Schema checks of the blind sets (tests/data/published-measurements-blind3.csv, -blind4.csv, -blind5.csv, -blind6.csv,
-blind7.csv, -blind8.csv, -blind9.csv, -blind10.csv, -blind11.csv, -blind12.csv, -blind13.csv, -blind14.csv and -blind15.csv).

Each file is parsed with :func:`corpus.load_rows` and checked for catalog look-ups, provenance and its spread over
publications (blind sets 4 to 15: organisations and engines too) only: it never predicts, so a set stays blind until it
is scored."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from infermeter.perfmodel.corpus import Row, load_rows, publication
from infermeter.perfmodel.hardware import get_hardware
from infermeter.perfmodel.models import catalog_names, get_model

DATA = Path(__file__).resolve().parents[1] / "data"
# a file at a commit, or a pull-request thread (a thread has no commit to pin)
PINNED = re.compile(r"^https://github\.com/[^/]+/[^/]+/(blob/[0-9a-f]{40}/.+|pull/\d+)$")
# blind sets 5 to 7 also take an issue thread (a thread is one publication, with no commit to pin either)
PINNED_OR_THREAD = re.compile(r"^https://github\.com/[^/]+/[^/]+/(blob/[0-9a-f]{40}/.+|pull/\d+|issues/\d+)$")
# blind set 8 also takes a Hugging Face model card, whose README commit its rows' conditions name
PINNED_THREAD_OR_CARD = re.compile(r"^(https://github\.com/[^/]+/[^/]+/(blob/[0-9a-f]{40}/.+|pull/\d+|issues/\d+)"
                                   r"|https://huggingface\.co/[^/]+/[^/]+)$")
# blind set 9 also takes a web page outside GitHub and Hugging Face (one publication: the page; its conditions say what
# the stored copy showed)
PINNED_THREAD_OR_PAGE = re.compile(r"^(https://github\.com/[^/]+/[^/]+/(blob/[0-9a-f]{40}/.+|pull/\d+|issues/\d+)"
                                   r"|https://(?!github\.com/|huggingface\.co/)[^/]+/.+)$")


def _rows(n: int) -> list[Row]:
    return load_rows(DATA / f"published-measurements-blind{n}.csv")


def _org(r: Row) -> str:
    """The organisation that published a row: the GitHub (or Hugging Face) owner, else the web page's host."""
    host, owner = (r.source_url.split("/") + ["", "", "", ""])[2:4]
    return owner if host in ("github.com", "huggingface.co") else host


@pytest.mark.parametrize(("n", "at_least"), [(3, 45), (4, 50), (5, 40), (6, 45), (7, 55), (8, 50), (9, 26),
                                             (10, 45), (11, 45), (12, 40), (13, 30), (14, 25), (15, 35)])
def test_blind_rows_resolve_in_catalog_and_carry_provenance(n: int, at_least: int) -> None:
    rows = _rows(n)
    assert len(rows) >= at_least
    catalog = set(catalog_names())
    for r in rows:
        # sets 6 to 12 keep their two collectors' prefixes (b6a-/b6b-, ..., b12a-/b12b-), set 13 its three (b13a-/b13b-/b13c-)
        assert re.match(rf"b{n}[abc]?-", r.id), r.id
        assert r.model in catalog, f"{r.id}: model {r.model!r} is not a catalog id"
        assert get_model(r.model) is not None
        assert get_hardware(r.hardware).name, r.id
        assert r.source_url.startswith("https://"), r.id
        assert r.date or r.engine_version, f"{r.id}: needs a date or an engine version"
        assert r.conditions, f"{r.id}: needs conditions"
        assert r.gpus >= r.tp * r.pp, r.id


def test_blind3_spreads_over_publications() -> None:
    per_pub = Counter(publication(r) for r in _rows(3))
    assert len(per_pub) >= 8
    assert max(per_pub.values()) <= 10


@pytest.mark.parametrize(("n", "pinned"), [(4, PINNED), (5, PINNED_OR_THREAD), (6, PINNED_OR_THREAD),
                                          (7, PINNED_OR_THREAD), (8, PINNED_THREAD_OR_CARD),
                                          (9, PINNED_THREAD_OR_PAGE), (10, PINNED_THREAD_OR_PAGE),
                                          (11, PINNED_THREAD_OR_PAGE), (12, PINNED_THREAD_OR_PAGE),
                                          (13, PINNED_THREAD_OR_PAGE), (14, PINNED_THREAD_OR_PAGE),
                                          (15, PINNED_THREAD_OR_PAGE)])
def test_blind_rows_are_pinned_versioned_dated_and_counted(n: int, pinned: re.Pattern[str]) -> None:
    for r in _rows(n):
        assert pinned.match(r.source_url), f"{r.id}: source_url is not a commit-pinned file or a PR (sets 5-7: or issue) thread"
        if r.source_url.startswith("https://huggingface.co/"):  # a model card's URL names no revision: conditions do
            assert "commit" in r.conditions, f"{r.id}: a model card row names the README commit it read"
        assert r.engine_version, f"{r.id}: needs the engine version (stated or inferred, conditions say which)"
        assert (r.date[:4].isdigit() and len(r.date) >= 7) or "date not stated" in r.conditions, f"{r.id}: date or 'date not stated'"
        if r.scenario == "saturated":  # a saturated run's drain needs the number of requests it queued at once
            assert r.setting("requests"), f"{r.id}: saturated row without requests=N"


# xinyuwei-david's MI300X handbook holds 14 of blind set 6's 45 rows (31%), just over the 30% bound: reported, not
# trimmed; set 6 has no TensorRT-LLM publication. The Qwen team's two speed-benchmark editions hold 18 of blind set 7's 60
# rows: 30%, at the bound. NVIDIA's two TensorRT-LLM perf-overview editions held 22 of blind set 8's 57 audited rows (39%):
# cut to 15 of 50 (30%) by a rule fixed before any scoring (test_blind8_counts); the 7 others are scored apart (-blind8x.csv).
# cssnoeasy's three A100 PCIe reports hold 10 of blind set 9's 26 audited rows (38%) and LambdaLabsML 8 (31%): reported
# to the coordinator, not trimmed here (the cap is the coordinator's blind rule); the bound is the real share. Blind set
# 10's largest organisations (mlc-ai, datacrunch-research) hold 7 of its 47 rows each (15%): no cap applied
# Blind set 11's largest organisations (crusoecloud, dennislee22) hold 12 of its 47 rows each (26%): no cap applied.
# Blind set 12's largest organisations (staru09, France-Travail) hold 12 of its 41 rows each (29%): no cap applied
# Blind set 13: sgl-project held 17 of the 42 audited rows (40%): cut by the SHA-1 rule to 10 of 35 (29%); cloudrift-ai
# and FreedomIntelligence then hold 12 of 35 each (34%): reported, not cut further (a cascade would leave about 10 rows)
# Blind set 14: surajssd held 12 of the 31 audited rows (39%): the strict cascade cut it to 8 of 27 (30%); every
# organisation is within 30% (test_blind14_counts); set 14 has vLLM rows only
# Blind set 15: argonne-lcf, staru09 and Scicom-AI-Enterprise-Organization hold 9 of the 39 audited rows each (23%):
# the strict cascade stops at once (39), no cap applied (test_blind15_counts)
@pytest.mark.parametrize(("n", "org_share", "engines"), [(4, 0.3, {"vllm", "sglang", "trtllm"}),
                                                        (5, 0.3, {"vllm", "sglang", "trtllm"}),
                                                        (6, 0.32, {"vllm", "sglang", "lmdeploy"}),
                                                        (7, 0.3, {"vllm", "sglang", "trtllm", "lmdeploy"}),
                                                        (8, 0.3, {"vllm", "sglang", "trtllm"}),
                                                        (9, 10 / 26, {"vllm", "sglang", "trtllm"}),
                                                        (10, 0.3, {"vllm", "sglang", "trtllm"}),
                                                        (11, 0.3, {"vllm", "sglang"}),
                                                        (12, 0.3, {"vllm", "sglang", "trtllm"}),
                                                        (13, 12 / 35, {"vllm", "sglang"}),
                                                        (14, 0.3, {"vllm"}),
                                                        (15, 0.3, {"vllm", "sglang", "trtllm", "llamacpp"})])
def test_blind_spreads_over_publications_organisations_and_engines(n: int, org_share: float, engines: set[str]) -> None:
    rows = _rows(n)
    per_pub = Counter(publication(r) for r in rows)
    per_org = Counter(_org(r) for r in rows)
    assert len(per_pub) >= 6
    assert len(per_org) >= 4
    assert max(per_org.values()) <= org_share * len(rows), per_org
    assert {r.engine for r in rows} >= engines
    assert any(r.engine == "vllm" and get_hardware(r.hardware).name.startswith("NVIDIA") for r in rows)
    assert any(get_model(r.model).is_moe for r in rows) and any(not get_model(r.model).is_moe for r in rows)
    assert len({r.hardware for r in rows}) >= 3


def test_blind6_counts() -> None:
    rows = _rows(6)
    assert (len(rows), len({publication(r) for r in rows}), len({r.source_url.split("/")[3] for r in rows})) == (45, 9, 8)
    assert {r.engine for r in rows} == {"vllm", "sglang", "lmdeploy"}
    assert any(r.engine == "vllm" and get_hardware(r.hardware).name.startswith("AMD") for r in rows)
    assert sum(get_model(r.model).is_moe for r in rows) == 18 and sum(not get_model(r.model).is_moe for r in rows) == 27
    assert len({r.hardware for r in rows}) >= 6
    assert {r.scenario for r in rows} == {"saturated", "fixed_concurrency", "static_batch"}


def test_blind7_counts() -> None:
    rows = _rows(7)
    assert (len(rows), len({publication(r) for r in rows}), len({r.source_url.split("/")[3] for r in rows})) == (60, 11, 8)
    assert Counter(r.engine for r in rows) == {"vllm": 29, "sglang": 24, "trtllm": 6, "lmdeploy": 1}
    assert sum(get_model(r.model).is_moe for r in rows) == 28 and sum(not get_model(r.model).is_moe for r in rows) == 32
    assert {r.hardware for r in rows} == {"a100-80gb", "b200", "h100-pcie", "h100-sxm", "h200", "l4"}
    assert Counter(r.scenario for r in rows) == {"saturated": 24, "fixed_concurrency": 18, "static_batch": 18}
    assert sum(r.id.startswith("b7a-") for r in rows) == 24 and sum(r.id.startswith("b7b-") for r in rows) == 36


def test_blind8_counts() -> None:
    """Blind set 8 as scored: 50 rows. The audit left 57, NVIDIA's two TensorRT-LLM editions holding 22 (39%, over the
    30% organisation bound): before any prediction was read, those 22 were ordered by the SHA-1 of their ids and the
    first 15 kept (15 of 50 = 30%); the other 7 are -blind8x.csv, scored apart and folded with the set."""
    import hashlib

    rows = _rows(8)
    orgs = {_org(r) for r in rows}
    assert (len(rows), len({publication(r) for r in rows}), len(orgs)) == (50, 8, 7)
    assert Counter(r.engine for r in rows) == {"vllm": 23, "trtllm": 15, "sglang": 12}
    assert sum(get_model(r.model).is_moe for r in rows) == 28 and sum(not get_model(r.model).is_moe for r in rows) == 22
    assert {r.hardware for r in rows} == {"a100-80gb", "h100-sxm", "h200", "l40s", "mi300x"}
    assert Counter(r.scenario for r in rows) == {"saturated": 23, "fixed_concurrency": 17, "request_rate": 8,
                                                 "static_batch": 2}
    assert sum(r.id.startswith("b8a-") for r in rows) == 36 and sum(r.id.startswith("b8b-") for r in rows) == 14
    for r in rows:  # an open loop states its rate and how many requests it sent, its client uncapped ("max": None)
        if r.scenario == "request_rate":
            assert r.setting("rate") and r.setting("requests") and r.concurrency is None, r.id
    # the cap's rule: of NVIDIA's rows in the set and beside it, the 15 first by SHA-1 of the id are the set's
    extra = load_rows(DATA / "published-measurements-blind8x.csv")
    nvidia = [r for r in rows + extra if _org(r) == "NVIDIA"]
    assert len(nvidia) == 22 and all(_org(r) == "NVIDIA" for r in extra)
    first = sorted(nvidia, key=lambda r: hashlib.sha1(r.id.encode()).hexdigest())[:15]
    assert {r.id for r in first} == {r.id for r in rows if _org(r) == "NVIDIA"}
    # the TensorRT-LLM v0.17 edition is one publication that both collectors read: no row twice
    keys = [(r.model, r.hardware, r.gpus, r.tp, r.pp, r.input_tokens, r.output_tokens, r.metric) for r in rows + extra
            if "258c7540c03517def55d9a5aadfa9288af474e1b" in r.source_url]
    assert len(keys) == len(set(keys)) == 14


def test_blind9_counts() -> None:
    """Blind set 9 as audited: 26 rows (collectors 9a, GitHub sources, and 9b, web pages: 27 + 1; the audit moved two
    mean-TTFT rows of LambdaLabsML's raw result files aside, whose mean_ttft_ms averages 0.0 for requests that streamed
    no text). LambdaLabsML's report and the raw result files behind its table are one publication (one source_url)."""
    rows = _rows(9)
    per_org = Counter(_org(r) for r in rows)
    assert (len(rows), len({publication(r) for r in rows})) == (26, 7)
    assert per_org == {"cssnoeasy": 10, "LambdaLabsML": 8, "sgl-project": 7, "johnmusgrave.com": 1}
    assert Counter(r.engine for r in rows) == {"vllm": 18, "sglang": 7, "trtllm": 1}
    assert sum(get_model(r.model).is_moe for r in rows) == 9 and sum(not get_model(r.model).is_moe for r in rows) == 17
    assert {r.hardware for r in rows} == {"a100-40gb", "a100-80gb", "a100-80gb-pcie", "h100-sxm", "h200"}
    assert Counter(r.scenario for r in rows) == {"fixed_concurrency": 11, "saturated": 8, "request_rate": 7}
    assert sum(r.id.startswith("b9a-") for r in rows) == 25 and sum(r.id.startswith("b9b-") for r in rows) == 1
    for r in rows:  # an open loop states its rate and how many requests it sent, its client uncapped ("max": None)
        if r.scenario == "request_rate":
            assert r.setting("rate") and r.setting("requests") and r.concurrency is None, r.id
    lambda_urls = {r.source_url for r in rows if _org(r) == "LambdaLabsML"}
    assert lambda_urls == {"https://github.com/LambdaLabsML/vllm-benchmark/blob/0e8fc5d0f9865a326666cb82aeb2d8dc74c82c5e/"
                           "benchmark_v0.md"}
    assert not any(r.metric == "ttft_ms" and _org(r) == "LambdaLabsML" for r in rows)


def _pinned(rows: list[Row], *, engines: dict[str, int], moe_dense: tuple[int, int], hardware: set[str],
            scenarios: dict[str, int], metrics: dict[str, int], halves: tuple[str, int, int]) -> None:
    """An audited set's pinned counts: engines, MoE and dense rows, hardware, scenarios, metrics, rows per collector
    (``halves``: the id prefix and the two collectors' counts); every open loop states its rate and request count."""
    assert Counter(r.engine for r in rows) == engines
    assert (sum(get_model(r.model).is_moe for r in rows), sum(not get_model(r.model).is_moe for r in rows)) == moe_dense
    assert {r.hardware for r in rows} == hardware
    assert Counter(r.scenario for r in rows) == scenarios and Counter(r.metric for r in rows) == metrics
    prefix, a, b = halves
    assert (sum(r.id.startswith(f"{prefix}a-") for r in rows), sum(r.id.startswith(f"{prefix}b-") for r in rows)) == (a, b)
    for r in rows:  # an open loop states its rate and how many requests it sent, its client uncapped ("max": None)
        if r.scenario == "request_rate":
            assert r.setting("rate") and r.setting("requests") and r.concurrency is None, r.id


def test_blind10_counts() -> None:
    """Blind set 10 as audited: 47 rows (collectors 10a, engine-project threads: 23, less one set aside; 10b,
    third-party benchmark repositories: 25). The audit moved sglang PR #2643's row to -blind10-aside.csv (its GPU is
    named nowhere in the thread). No organisation exceeds 30% of the set and no publication 12 rows, so no cap applied
    (no -blind10x.csv). datacrunch-research's Llama 3.3 70B online file is a publication apart from its offline file
    (main corpus) and its 405B online file (blind set 8): no row of those is repeated."""
    rows = _rows(10)
    per_org = Counter(_org(r) for r in rows)
    per_pub = Counter(publication(r) for r in rows)
    assert (len(rows), len(per_pub), max(per_pub.values())) == (47, 15, 7)
    assert per_org == {"mlc-ai": 7, "datacrunch-research": 7, "vllm-project": 6, "NVIDIA": 6, "tenstorrent": 6,
                       "cmontemuino": 6, "gpustack": 5, "sgl-project": 4}
    _pinned(rows, engines={"vllm": 30, "sglang": 11, "trtllm": 6}, moe_dense=(19, 28),
            hardware={"a100-80gb", "a100-80gb-pcie", "a10g", "b200", "h200", "mi300x", "rtx-4090"},
            scenarios={"request_rate": 14, "static_batch": 13, "saturated": 10, "fixed_concurrency": 10},
            metrics={"output_tokens_per_s": 31, "ttft_ms": 9, "tpot_ms": 7}, halves=("b10", 22, 25))
    aside = load_rows(DATA / "published-measurements-blind10-aside.csv")
    assert [r.id for r in aside] == ["b10a-sg2643-dsv3-h200-sharegpt5000"]
    assert not {r.id for r in aside} & {r.id for r in rows}
    # the two collectors' files, kept for the record, hold the set and the aside row, nothing else
    collected = [r for c in "ab" for r in load_rows(DATA / f"published-measurements-blind10{c}.csv")]
    assert sorted(r.id for r in collected) == sorted(r.id for r in rows + aside)
    # datacrunch's 70B online file repeats no measurement of the same repository's files already in the corpus
    dc = {(r.model, r.hardware, r.gpus, r.metric, r.value) for r in rows if _org(r) == "datacrunch-research"}
    earlier = [r for f in ("published-measurements.csv", "published-measurements-blind8.csv")
               for r in load_rows(DATA / f) if _org(r) == "datacrunch-research" and not r.id.startswith("b10")]
    assert len(dc) == 7 and earlier and not dc & {(r.model, r.hardware, r.gpus, r.metric, r.value) for r in earlier}


def _study(r: Row) -> str:
    """A row's study for blind set 11's 12-row cap: a repository's benchmark run set (the repository at one commit, its
    raw result files together), else the thread or page."""
    m = re.match(r"^(https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40})/", r.source_url)
    return m.group(1) if m else r.source_url


def test_blind11_counts() -> None:
    """Blind set 11 as audited: 47 rows (collectors 11a, engine-project threads and docs: 26; 11b, third-party
    benchmark repositories and a blog: 47). The audit set aside the rows whose GPU the source does not pin to one catalog
    part with a material difference (-blind11-aside.csv, 26 rows): tenstorrent issue #143 ('2xH100': SXM, PCIe or NVL),
    the sgl-cookbook Llama 3.1 section ('NVIDIA A100 GPU (8x)': 40 or 80 GB) and Tim Wang's blog ('1 NVIDIA H100
    80GB': SXM or PCIe, whose kept concurrencies were also chosen after the values were printed). dennislee22's 'NVIDIA
    A100 80GB' rows stay, read as the SXM part, as blind sets 4 and 7 read an unstated A100 80GB form factor (the two
    parts differ by 5% in bandwidth): a rule fixed before any prediction of this set. No organisation then holds more
    than 30%, so no cap (the audit's first cut, 30 rows with 5 capped, is void). The 12-row cap counts per study (a
    repository's run set at one commit, where anyscale and Crusoe cite one raw file per row), not per file. The two
    halves share no source and no measurement."""
    rows = _rows(11)
    per_org = Counter(_org(r) for r in rows)
    per_study = Counter(_study(r) for r in rows)
    assert (len(rows), len({publication(r) for r in rows}), len(per_study), max(per_study.values())) == (47, 17, 6, 12)
    assert per_org == {"crusoecloud": 12, "dennislee22": 12, "anyscale": 11, "vllm-project": 9, "sgl-project": 3}
    assert max(per_org.values()) / len(rows) <= 0.3
    _pinned(rows, engines={"vllm": 44, "sglang": 3}, moe_dense=(23, 24), hardware={"a100-80gb", "h100-sxm", "l40s", "mi300x"},
            scenarios={"saturated": 15, "fixed_concurrency": 14, "request_rate": 12, "static_batch": 6},
            metrics={"output_tokens_per_s": 29, "tpot_ms": 12, "ttft_ms": 6}, halves=("b11", 12, 35))
    aside = load_rows(DATA / "published-measurements-blind11-aside.csv")
    extra: list[Row] = []
    assert not (DATA / "published-measurements-blind11x.csv").exists()
    assert len(aside) == 26 and all("AUDIT 11: set aside" in r.notes for r in aside)
    assert {r.hardware for r in aside} == {"a100-80gb", "h100-sxm"} and not any("dennislee22" in r.source_url for r in aside)
    assert max(Counter(_study(r) for r in rows).values()) <= 12
    # the two collectors' files, kept for the record, hold the set, the aside rows and the capped rows, nothing else
    collected = [r for c in "ab" for r in load_rows(DATA / f"published-measurements-blind11{c}.csv")]
    assert sorted(r.id for r in collected) == sorted(r.id for r in rows + aside + extra)
    # no measurement twice across the halves or within the set
    keys = [(r.model, r.hardware, r.gpus, r.tp, r.weight_dtype, r.engine, r.scenario, r.concurrency, r.input_tokens,
             r.output_tokens, r.metric, r.value) for r in collected]
    assert len(keys) == len(set(keys))
    assert not {_study(r) for r in collected if r.id.startswith("b11a-")} & {_study(r) for r in collected
                                                                             if r.id.startswith("b11b-")}



def test_blind12_counts() -> None:
    """Blind set 12 as audited: 41 rows (collectors 12a, the TensorRT-LLM performance-tuning guide and two fused-MoE
    config PRs: 18, of which 15 kept; 12b, third-party benchmark repositories: 40, of which 26 kept). The audit set aside
    (-blind12-aside.csv, 17 rows) the guide's 3 baseline-engine rows, already in the corpus from blind set 4 (the next
    page of the guide repeats the baseline: b4-nvtune-h100-l70b-bf16-baseline and its bs1 TTFT/TPOT rows),
    shaamil101-etched's 11 'Llama 3.1 8B on one H100' rows, whose figures, lengths and request counts are the
    repository's own trtllm-bench result files of Llama-3.1-70B FP8 at TP8 (the README at the commit those files belong
    to is a used source), and dzhsurf's 3 DeepSeek-V3-AWQ rows, read from prose as 'around' or 'about' values. France-Travail's 'A100-80g'/'A100-40g' rows stay as a100-80gb/a100-40gb with the form factor not
    stated (the rule of sets 4, 7 and 11); xinyuwei-david's Azure NC H100 v5 rows are h100-nvl. No organisation holds
    more than 30% (staru09 and France-Travail 12 of 41 each), no study more than 12 rows: no cap, no -blind12x.csv.
    The two halves share no source and no measurement."""
    rows = _rows(12)
    per_org = Counter(_org(r) for r in rows)
    per_study = Counter(_study(r) for r in rows)
    assert (len(rows), len({publication(r) for r in rows}), len(per_study), max(per_study.values())) == (41, 14, 6, 12)
    assert per_org == {"NVIDIA": 9, "staru09": 12, "France-Travail": 12, "vllm-project": 3, "sgl-project": 3,
                       "xinyuwei-david": 2}
    assert max(per_org.values()) / len(rows) <= 0.3
    _pinned(rows, engines={"vllm": 29, "trtllm": 9, "sglang": 3}, moe_dense=(8, 33),
            hardware={"a100-40gb", "a100-80gb", "b200", "h100-nvl", "h100-sxm"},
            scenarios={"fixed_concurrency": 32, "saturated": 9},
            metrics={"output_tokens_per_s": 17, "ttft_ms": 15, "tpot_ms": 9}, halves=("b12", 15, 26))
    aside = load_rows(DATA / "published-measurements-blind12-aside.csv")
    assert not (DATA / "published-measurements-blind12x.csv").exists()
    assert len(aside) == 17 and all("AUDIT 12: set aside" in r.notes for r in aside)
    assert Counter(_org(r) for r in aside) == {"shaamil101-etched": 11, "dzhsurf": 3, "NVIDIA": 3}
    # no row of the set repeats a corpus measurement (the guide's baseline is blind set 4's b4-nvtune rows); the set's own
    # rows joined the corpus after scoring
    corpus = [r for r in load_rows(DATA / "published-measurements.csv") if r.id not in {x.id for x in rows}]
    seen = {(r.model, r.hardware, r.tp, r.engine, r.input_tokens, r.output_tokens, r.metric, r.value) for r in corpus}
    assert not [r.id for r in rows if (r.model, r.hardware, r.tp, r.engine, r.input_tokens, r.output_tokens, r.metric,
                                       r.value) in seen]
    assert all((r.model, r.hardware, r.tp, r.engine, r.input_tokens, r.output_tokens, r.metric, r.value) in seen
               for r in aside if _org(r) == "NVIDIA")
    assert all("form factor not stated" in r.conditions for r in rows if _org(r) == "France-Travail")
    # every row run without CUDA graphs (staru09's --enforce-eager) carries the setting
    assert {r.id for r in rows if r.setting("enforce_eager") == 1} == {r.id for r in rows if _org(r) == "staru09"}
    # the two collectors' files, kept for the record, hold the set and the aside rows, nothing else
    collected = [r for c in "ab" for r in load_rows(DATA / f"published-measurements-blind12{c}.csv")]
    assert sorted(r.id for r in collected) == sorted(r.id for r in rows + aside)
    keys = [(r.model, r.hardware, r.gpus, r.tp, r.weight_dtype, r.engine, r.scenario, r.concurrency, r.input_tokens,
             r.output_tokens, r.metric, r.value) for r in collected]
    assert len(keys) == len(set(keys))
    assert not {_study(r) for r in collected if r.id.startswith("b12a-")} & {_study(r) for r in collected
                                                                             if r.id.startswith("b12b-")}

# blind sets 9 and 10, scored, joined the corpus; these threads did not (docs/performance-model.md section 8, decided
# before the fold): two are titled as performance problems and one infers its GPU from an accuracy heading
NOT_FOLDED = ("NVIDIA/TensorRT-LLM/issues/4043", "NVIDIA/TensorRT-LLM/issues/5929", "sgl-project/sglang/pull/4918")


def test_blind_sets_9_and_10_are_folded_unchanged_but_for_three_threads_and_two_stated_settings() -> None:
    """Every scored row of sets 9 and 10 is in the corpus with the same figures and conditions, except the 10 rows of
    the three threads and mlc-ai's 7 rows of vLLM 0.2.0, which predates graph capture and runs at about 45 ms a token
    whatever its TP degree, a regime the model does not describe (in the aside file, saying so); the fold adds only
    what their conditions state: ``vllm_use_v1=1`` on vLLM #12568's rows (its V1 alpha) and ``enforce_eager=1`` on
    the rows run without CUDA graphs."""
    corpus = {r.id: r for r in load_rows(DATA / "published-measurements.csv")}
    scored = [r for n in (9, 10) for r in load_rows(DATA / f"published-measurements-blind{n}.csv")]
    left = [r for r in scored if r.id not in corpus]
    threads = [r for r in left if any(t in r.source_url for t in NOT_FOLDED)]
    old_engine = [r for r in left if r not in threads]
    assert len(threads) == 10 and len(old_engine) == 7
    assert all(r.engine_spec == "vllm@0.2.0" and "mlc-ai" in r.source_url for r in old_engine)
    aside = {r.id: r for r in load_rows(DATA / "published-measurements-aside.csv")}
    assert all(r.id in aside and "predates graph capture" in aside[r.id].notes for r in old_engine)
    assert not any(any(t in r.source_url for t in NOT_FOLDED) for r in corpus.values())
    added = {}
    for r in scored:
        if r.id in corpus:
            c = corpus[r.id]
            assert (c.model, c.hardware, c.config, c.metric, c.value, c.conditions, c.source_url) == \
                   (r.model, r.hardware, r.config, r.metric, r.value, r.conditions, r.source_url), r.id
            extra = set(c.settings) - set(r.settings)
            assert set(r.settings) <= set(c.settings), r.id
            if extra:
                added[r.id] = extra
    assert {k for v in added.values() for k in v} == {("vllm_use_v1", 1), ("enforce_eager", 1)}
    assert all("12568" in corpus[i].source_url for i, v in added.items() if ("vllm_use_v1", 1) in v)
    assert all("eager mode" in corpus[i].conditions for i, v in added.items() if ("enforce_eager", 1) in v)


def _folded(n: int) -> dict[str, set[tuple[str, Any]]]:
    """Blind set ``n``'s scored rows, every one in the corpus and alike there in every field but settings the fold added
    (returned per id); its aside rows are not in the corpus."""
    corpus = {r.id: r for r in load_rows(DATA / "published-measurements.csv")}
    scored = load_rows(DATA / f"published-measurements-blind{n}.csv")
    assert all(r.id in corpus for r in scored)
    added = {}
    for r in scored:
        extra = set(corpus[r.id].settings) - set(r.settings)
        kept = dataclasses.replace(corpus[r.id], settings=tuple(kv for kv in corpus[r.id].settings if kv not in extra))
        assert dataclasses.asdict(kept) == dataclasses.asdict(r), r.id
        added[r.id] = extra
    assert not {r.id for r in load_rows(DATA / f"published-measurements-blind{n}-aside.csv")} & set(corpus)
    return added


def test_blind_set_11_is_folded_unchanged() -> None:
    """Every scored row of set 11 joined the corpus as scored (same figures, conditions and settings: its collectors
    already wrote the stated settings); its aside rows did not."""
    assert not any(_folded(11).values())


def test_blind_set_12_is_folded_with_its_stated_output_cap() -> None:
    """Every scored row of set 12 joined the corpus as scored, except that staru09's twelve rows, whose conditions state
    ``max_tokens 1024 for every prompt``, carry that cap as ``max_output=1024`` (a setting the model gained after set 12
    was scored: docs/performance-model.md section 8, thirteenth round); its aside rows did not join."""
    added = _folded(12)
    capped = {i for i, extra in added.items() if extra}
    assert len(capped) == 12 and all(i.startswith("b12b-staru-") and added[i] == {("max_output", 1024)} for i in capped)
    assert all("max_tokens 1024 for every prompt" in r.conditions
               for r in load_rows(DATA / "published-measurements-blind12.csv") if r.id in capped)


def test_blind_set_13_and_its_capped_rows_are_folded_unchanged() -> None:
    """Every scored row of set 13, and the seven sgl-project rows the 30% cap kept apart (-blind13x.csv, scored apart),
    joined the corpus as scored; the three aside rows did not. The TP16 rows over two H200 nodes state no network:
    they are predicted on the default (ib-ndr400), a term added after the set was scored."""
    assert not any(_folded(13).values())
    corpus = {r.id: r for r in load_rows(DATA / "published-measurements.csv")}
    extra = load_rows(DATA / "published-measurements-blind13x.csv")
    assert len(extra) == 7 and all(dataclasses.asdict(corpus[r.id]) == dataclasses.asdict(r) for r in extra)
    assert {r.id for r in corpus.values() if r.gpus > 8} == {r.id for r in _rows(13) if r.gpus > 8} and all(
        corpus[i].setting("network") is None for i in (r.id for r in _rows(13) if r.gpus > 8))


def test_blind13_counts() -> None:
    """Blind set 13 as audited: 35 rows (collectors 13a, engine PR threads: 7; 13b, CloudRift's raw result files: 12;
    13c, the SGLang cookbook's GLM-4.6 page, TensorRT-LLM's GPT-OSS blog and AccelMark's result files: 26). The audit set
    aside (-blind13-aside.csv, 3 rows) SGLang PR #12343's row, whose throughput assumed 1024 generated tokens per request
    that the cut stored copy does not show, and the blog's two prose figures (420 tps/user, '19.5k tps/gpu'). CloudRift's
    four result files are runs that the README blind set 8 cited (f8e34f1) does not present: kept. sgl-project then held
    17 of 42 rows (40%): before any prediction was read, its rows were ordered by the SHA-1 of their ids and the first 10
    kept (10 of 35, the largest k with k <= 30% of the set); the other 7 are -blind13x.csv, scored apart. cloudrift-ai and
    FreedomIntelligence hold 12 of 35 each (34%), over 30% after the cut: reported, not cut further."""
    import hashlib

    rows = _rows(13)
    per_org = Counter(_org(r) for r in rows)
    per_study = Counter(_study(r) for r in rows)
    assert (len(rows), len({publication(r) for r in rows}), len(per_study), max(per_study.values())) == (35, 14, 6, 12)
    assert per_org == {"sgl-project": 10, "cloudrift-ai": 12, "FreedomIntelligence": 12, "vllm-project": 1}
    _pinned(rows, engines={"vllm": 25, "sglang": 10}, moe_dense=(20, 15),
            hardware={"a100-40gb", "a100-80gb", "b200", "h100-sxm", "h200", "l4", "rtx-4090"},
            scenarios={"fixed_concurrency": 23, "saturated": 6, "request_rate": 6},
            metrics={"output_tokens_per_s": 17, "tpot_ms": 13, "ttft_ms": 5}, halves=("b13", 5, 12))
    assert sum(r.id.startswith("b13c-") for r in rows) == 18
    aside = load_rows(DATA / "published-measurements-blind13-aside.csv")
    extra = load_rows(DATA / "published-measurements-blind13x.csv")
    assert len(aside) == 3 and all("AUDIT 13: set aside" in r.notes for r in aside)
    assert Counter(_org(r) for r in aside) == {"sgl-project": 1, "NVIDIA": 2}
    # the cap's rule: of sgl-project's rows in the set and beside it, the 10 first by SHA-1 of the id are the set's
    sgl = [r for r in rows + extra if _org(r) == "sgl-project"]
    assert len(sgl) == 17 and len(extra) == 7 and all(_org(r) == "sgl-project" for r in extra)
    first = sorted(sgl, key=lambda r: hashlib.sha1(r.id.encode()).hexdigest())[:10]
    assert {r.id for r in first} == {r.id for r in rows if _org(r) == "sgl-project"}
    assert 10 <= 0.3 * len(rows) < 11
    # no row repeats a measurement of any other data file (same model, hardware and value)
    seen = {(r.model, r.hardware, r.value) for p in DATA.glob("published-measurements*.csv") if "blind13" not in p.name
            for r in load_rows(p) if not r.id.startswith("b13")}  # the corpus holds set 13 since its fold
    assert not [r.id for r in rows + extra + aside if (r.model, r.hardware, r.value) in seen]
    # CloudRift's result files are not the README blind set 8 cited
    assert all("/results/" in r.source_url for r in rows if _org(r) == "cloudrift-ai")
    # an output cap stated for a length distribution is carried; fixed lengths carry none
    for r in rows + extra:
        if r.setting("lengths") in ("sharegpt", "uniform"):
            assert r.setting("max_output") and r.setting("max_output") >= r.output_tokens, r.id
        else:
            assert r.setting("max_output") is None, r.id
    # none of set 13's runs is stated without CUDA graphs (CloudRift's say 'no --enforce-eager'): no row carries
    # enforce_eager=1, and test_corpus_engines checks that every blind row whose conditions say so would
    assert not [r.id for r in rows + extra if r.setting("enforce_eager") == 1]
    _collected_once(13, rows + aside + extra)


def _collected_once(n: int, audited: list[Any]) -> None:
    """The three collectors' files of set ``n``, kept for the record, hold its scored, aside and capped rows (``audited``)
    and nothing else, and no measurement twice."""
    collected = [r for c in "abc" for r in load_rows(DATA / f"published-measurements-blind{n}{c}.csv")]
    assert sorted(r.id for r in collected) == sorted(r.id for r in audited)
    keys = [(r.model, r.hardware, r.gpus, r.tp, r.weight_dtype, r.engine, r.scenario, r.concurrency, r.input_tokens,
             r.output_tokens, r.metric, r.value) for r in collected]
    assert len(keys) == len(set(keys))


def test_blind14_counts() -> None:
    """Blind set 14 as audited: 27 rows (collectors 14a, engine threads: vLLM PR #17535 and recipes PR #431, 7; 14b,
    third-party result files: Anyscale and France-Travail, 12; 14c, surajssd/llm-k8s: 8 of 12). The audit set aside
    (-blind14-aside.csv, 20 rows) cmontemuino's six mem0.8 files (reruns of the mem0.9 configurations blind set 10 took),
    willettAMT's 4-GPU file's single-GPU baseline (a rerun of the configuration blind set 2 took) and DigitalOcean's
    twelve '1x H200 141GB' rows (a single-GPU droplet whose form factor nothing in the repository shows: SXM or NVL).
    Caps, fixed before any prediction: at most 12 rows per publication (none over), then the strict 30% rule per
    organisation: with c_i each organisation's rows, n = sum(c_i), repeat n <- sum(min(c_i, floor(0.3 n))) until it
    stops (31 -> 28 -> 27); each organisation keeps its first min(c_i, floor(0.3 n)) rows by the SHA-1 hex digest of
    the id. surajssd keeps 8 of 12; its other 4 are -blind14x.csv, scored apart. Final shares: surajssd 8/27 (29.6%),
    vllm-project 7/27 (25.9%), anyscale 6/27 (22.2%), France-Travail 6/27 (22.2%)."""
    import hashlib
    import math

    rows = _rows(14)
    aside = load_rows(DATA / "published-measurements-blind14-aside.csv")
    extra = load_rows(DATA / "published-measurements-blind14x.csv")
    per_org = Counter(_org(r) for r in rows)
    per_study = Counter(_study(r) for r in rows)
    assert (len(rows), len({publication(r) for r in rows}), len(per_study), max(per_study.values())) == (27, 12, 5, 8)
    assert per_org == {"surajssd": 8, "vllm-project": 7, "anyscale": 6, "France-Travail": 6}
    _pinned(rows, engines={"vllm": 27}, moe_dense=(10, 17), hardware={"a100-40gb", "a100-80gb", "h100-sxm", "mi300x"},
            scenarios={"fixed_concurrency": 15, "saturated": 6, "request_rate": 6},
            metrics={"output_tokens_per_s": 13, "ttft_ms": 8, "tpot_ms": 6}, halves=("b14", 7, 12))
    assert sum(r.id.startswith("b14c-") for r in rows) == 8
    assert len(aside) == 20 and all("AUDIT 14: set aside" in r.notes for r in aside)
    assert Counter(_org(r) for r in aside) == {"cmontemuino": 6, "willettAMT": 2, "DO-Solutions": 12}
    # the cap's rule: the strict cascade over the organisations' rows in the set and beside it, then SHA-1 order
    pool = rows + extra
    counts = Counter(_org(r) for r in pool)
    n, seen_n = sum(counts.values()), []
    while n not in seen_n:
        seen_n.append(n)
        n = sum(min(c, math.floor(0.3 * n)) for c in counts.values())
    assert (seen_n, n) == ([31, 28, 27], 27) and n >= 20
    for o, c in counts.items():
        first = sorted((r for r in pool if _org(r) == o), key=lambda r: hashlib.sha1(r.id.encode()).hexdigest())
        assert {r.id for r in first[:min(c, math.floor(0.3 * n))]} == {r.id for r in rows if _org(r) == o}, o
    assert len(extra) == 4 and all(_org(r) == "surajssd" for r in extra)
    assert max(Counter(_study(r) for r in pool + aside).values()) <= 12  # the publication cap: none over
    assert max(per_org.values()) <= 0.3 * len(rows)
    # no row repeats a measurement of any other data file (same model, hardware and value)
    seen = {(r.model, r.hardware, r.value) for p in DATA.glob("published-measurements*.csv") if "blind14" not in p.name
            for r in load_rows(p) if not r.id.startswith("b14")}  # the corpus will hold set 14 once it is folded
    assert not [r.id for r in rows + extra if (r.model, r.hardware, r.value) in seen]
    # max_output both ways: no kept row states a single per-request cap (ShareGPT rows send each reply's own length),
    # none carries the setting; fixed lengths never do
    assert not [r.id for r in rows + extra if r.setting("max_output") is not None]
    # no kept run is stated without CUDA graphs
    assert not [r.id for r in rows + extra if r.setting("enforce_eager") == 1]
    _collected_once(14, rows + aside + extra)


def test_blind15_counts() -> None:
    """Blind set 15 as audited: 39 rows (collectors 15a, engine threads and recipes: sglang PR #1262, vLLM PR #27323,
    llama.cpp PR #8062, gpu-recipes a3ultra 405B TRT-LLM, 6; 15b, third-party result files: argonne-lcf
    Fig_22 TTFT file, staru09 concurrency-50/80 files, Scicom llm-benchmaq, DataCrunch's SGLang README offline table,
    30; 15c, vLLM offline-batch READMEs: llm-compressor's A10G offline edition and robertgshaw2's H100 sample, 3). The
    audit set aside (-blind15-aside.csv, 13 rows) LambdaLabsML's Llama-3-8B len2048 run (17 of its 320 requests
    returned no token: failed requests), llm-compressor's online-serving README (its GPU is 'A10G' in the header
    and 'an A10' in the run's own text: ambiguous part; also only on an unmerged branch) and llama.cpp PR #7860's row
    (its value is not the first table's master figure, 5611.17, and would be the FP16-cuBLAS table's: two 'master'
    paths for one nominal configuration, the row not saying which). Argonne's rows are static
    batches of 16 x 1024 tokens with one output token, whose 'TTFT Latency' is the batch's time to its first tokens
    (the publication gives no per-request mean). Caps, fixed before any prediction: at most 12 rows per publication
    (none over: the largest study, Argonne's file, holds 9), then the strict 30% rule per organisation: with c_i each
    organisation's rows, n = sum(c_i), repeat n <- sum(min(c_i, floor(0.3 n))) until it stops (39, at once: floor(11.7)
    is above every c_i); each organisation would keep its first min(c_i, floor(0.3 n)) rows by the SHA-1 hex digest of
    the id: none is cut, no -blind15x.csv. Final shares: argonne-lcf, staru09 and Scicom-AI-Enterprise-Organization
    9/39 each (23.1%), vllm-project 4/39 (10.3%), datacrunch-research 3/39, sgl-project 2/39, ggml-org,
    AI-Hypercomputer and robertgshaw2-neuralmagic 1/39 each."""
    import hashlib
    import math

    rows = _rows(15)
    aside = load_rows(DATA / "published-measurements-blind15-aside.csv")
    assert not (DATA / "published-measurements-blind15x.csv").exists()
    per_org = Counter(_org(r) for r in rows)
    per_study = Counter(_study(r) for r in rows)
    assert (len(rows), len({publication(r) for r in rows}), len(per_study), max(per_study.values())) == (39, 18, 10, 9)
    assert per_org == {"argonne-lcf": 9, "staru09": 9, "Scicom-AI-Enterprise-Organization": 9, "vllm-project": 4,
                       "datacrunch-research": 3, "sgl-project": 2, "ggml-org": 1, "AI-Hypercomputer": 1,
                       "robertgshaw2-neuralmagic": 1}
    _pinned(rows, engines={"vllm": 26, "sglang": 8, "trtllm": 4, "llamacpp": 1}, moe_dense=(4, 35),
            hardware={"a100-80gb", "a10g", "b200", "h100-sxm", "h200", "mi300x", "rtx-4090"},
            scenarios={"fixed_concurrency": 15, "saturated": 15, "static_batch": 9},
            metrics={"output_tokens_per_s": 16, "ttft_ms": 16, "tpot_ms": 6, "prefill_tokens_per_s": 1},
            halves=("b15", 6, 30))
    assert sum(r.id.startswith("b15c-") for r in rows) == 3
    assert len(aside) == 13 and all("AUDIT 15: set aside" in r.notes for r in aside)
    assert Counter(_org(r) for r in aside) == {"LambdaLabsML": 3, "vllm-project": 9, "ggml-org": 1}
    # the cap's rule: the strict cascade over the organisations' rows, then SHA-1 order (here it cuts nothing)
    counts = Counter(_org(r) for r in rows)
    n, seen_n = sum(counts.values()), []
    while n not in seen_n:
        seen_n.append(n)
        n = sum(min(c, math.floor(0.3 * n)) for c in counts.values())
    assert (seen_n, n) == ([39], 39) and n >= 20
    for o, c in counts.items():
        first = sorted((r for r in rows if _org(r) == o), key=lambda r: hashlib.sha1(r.id.encode()).hexdigest())
        assert len(first[:min(c, math.floor(0.3 * n))]) == c, o
    assert max(Counter(_study(r) for r in rows + aside).values()) <= 12  # the publication cap: none over
    assert max(per_org.values()) <= 0.3 * len(rows)
    # no row repeats a measurement of any other data file (same model, hardware and value)
    seen = {(r.model, r.hardware, r.value) for p in DATA.glob("published-measurements*.csv") if "blind15" not in p.name
            for r in load_rows(p)}
    assert not [r.id for r in rows if (r.model, r.hardware, r.value) in seen]
    # max_output both ways: only rows whose source states one per-request cap carry it (SGLang random runs' upper
    # bound, staru09's max_tokens, the offline scripts' max_tokens=250); fixed lengths and own-length ShareGPT never do
    capped = {r.id for r in rows if r.setting("max_output") is not None}
    assert capped == {r.id for r in rows if r.id.startswith(("b15a-sgl1262-", "b15b-staru-", "b15c-"))
                      or "-sgl-tp8-" in r.id}
    assert not [r.id for r in rows if r.setting("lengths") == "fixed" and r.setting("max_output") is not None]
    # eager mode where stated: staru09's runs use --enforce-eager, no other kept run is stated without CUDA graphs
    assert {r.id for r in rows if r.setting("enforce_eager") == 1} == {r.id for r in rows if r.id.startswith("b15b-staru-")}
    _collected_once(15, rows + aside)


def test_blind_set_14_and_its_capped_rows_are_folded_unchanged() -> None:
    """Every scored row of set 14, and the four surajssd rows the strict 30% cap kept apart (-blind14x.csv, scored
    apart), joined the corpus as scored; the twenty aside rows did not."""
    assert not any(_folded(14).values())
    corpus = {r.id: r for r in load_rows(DATA / "published-measurements.csv")}
    extra = load_rows(DATA / "published-measurements-blind14x.csv")
    assert len(extra) == 4 and all(dataclasses.asdict(corpus[r.id]) == dataclasses.asdict(r) for r in extra)
