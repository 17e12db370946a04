"""Every file a user writes is validated before use: random and mutated documents give a clean error.

Hypothesis feeds each loader (study, campaign, hardware, prices and calibration YAML; datasets;
the validation CSV) random documents and mutations of a valid one. A loader may accept a document
or raise :class:`~infermeter.errors.UserError` (the CLI prints it on one line and exits 2) that
names the file; anything else -- a traceback -- fails the test.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infermeter.errors import UserError

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
                    derandomize=True)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(string.printable, max_size=12))
keys = st.one_of(st.sampled_from(["model", "configurations", "config", "targets", "loads", "name", "engine",
                                  "profiles", "slo", "ttft_ms", "rate", "duration", "providers", "offers",
                                  "schema_version", "memory_gib", "bandwidth_gbs", "tflops", "engines", "priors",
                                  "value", "family", "phase", "fitted", "soak", "claims", "calibration", "provider"]),
                 st.text(string.ascii_lowercase + "_", min_size=1, max_size=10))
documents = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                           st.dictionaries(keys, inner, max_size=5)), max_leaves=25)


def mutate(doc: Any, path_choice: list[int], junk: Any) -> Any:
    """Replace one value (picked by ``path_choice``) of a valid document by ``junk``, or drop a key."""
    if not path_choice or not isinstance(doc, (dict, list)) or not doc:
        return junk
    i = path_choice[0]
    if isinstance(doc, dict):
        k = list(doc)[i % len(doc)]
        out = dict(doc)
        if i % 7 == 3:
            out.pop(k)
            return out
        out[k] = mutate(doc[k], path_choice[1:], junk)
        return out
    out_l = list(doc)
    j = i % len(out_l)
    out_l[j] = mutate(out_l[j], path_choice[1:], junk)
    return out_l


def check(loader: Callable[[Path], Any], path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    try:
        loader(path)
    except UserError as exc:
        msg = str(exc)
        assert "\n" not in msg.strip(), msg
        assert path.name in msg or str(path) in msg, f"the error does not name the file: {msg}"


def _study(p: Path) -> Any:
    """The CLI's own path: the file, the (empty) flags merged in, then validation."""
    from infermeter.study.flags import study_from

    return study_from(p, None, {})


def _campaign(p: Path) -> Any:
    from infermeter.campaign.spec import load_campaign

    return load_campaign(p)


def _hardware(p: Path) -> Any:
    from infermeter.perfmodel.hardware import load_catalog

    return load_catalog(str(p))


def _prices(p: Path) -> Any:
    from infermeter.analysis.prices import load_catalog

    return load_catalog(overrides=p)


def _calibration(p: Path) -> Any:
    from infermeter.perfmodel.calibration import load_calibration

    return load_calibration(str(p))


YAML_LOADERS = {"study": _study, "campaign": _campaign, "hardware": _hardware, "prices": _prices,
                "calibration": _calibration}
VALID = {
    "study": {"model": "llama-3.1-8b", "configurations": ["h100-sxm", {"config": "2xa100-80gb:tp2"}],
              "profiles": ["chat"], "slo": {"ttft_ms": 500}},
    "campaign": {"targets": [{"name": "a", "engine": "emulator"}], "loads": [{"name": "c1", "concurrency": 1,
                                                                             "requests": 5}]},
    "hardware": {"my-gpu": {"name": "My GPU", "type": "gpu", "family": "ampere", "memory_gib": 24,
                            "bandwidth_gbs": 900, "tflops": {"bf16": 100}}},
    "prices": {"schema_version": 1, "providers": {}, "offers": []},
    "calibration": {"smooth": 2.0, "engines": {}, "priors": []},
}


@pytest.mark.parametrize("kind", sorted(YAML_LOADERS))
@SETTINGS
@given(doc=documents)
def test_random_yaml_documents_get_a_clean_error(kind, doc, tmp_path):
    check(YAML_LOADERS[kind], tmp_path / f"{kind}.yaml", yaml.safe_dump(doc))


@pytest.mark.parametrize("kind", sorted(YAML_LOADERS))
@SETTINGS
@given(path=st.lists(st.integers(0, 50), max_size=4), junk=documents)
def test_mutated_valid_yaml_documents_get_a_clean_error(kind, path, junk, tmp_path):
    check(YAML_LOADERS[kind], tmp_path / f"{kind}.yaml", yaml.safe_dump(mutate(VALID[kind], path, junk)))


@SETTINGS
@given(text=st.text(string.printable, max_size=200))
def test_yaml_that_does_not_parse_names_the_file(text, tmp_path):
    for kind, loader in YAML_LOADERS.items():
        check(loader, tmp_path / f"{kind}.yaml", text)


def _dataset(p: Path) -> Any:
    from infermeter.workload.datafiles import read_entries

    return read_entries(p)


@SETTINGS
@given(rows=st.lists(documents, max_size=6))
def test_random_dataset_rows_get_a_clean_error(rows, tmp_path):
    check(_dataset, tmp_path / "data.jsonl", "\n".join(json.dumps(r) for r in rows))
    check(_dataset, tmp_path / "data.json", json.dumps(rows))


def _validation(p: Path) -> Any:
    from infermeter.perfmodel.validate import load_rows

    return load_rows(p)


CSV_HEAD = ("id,model,hardware,gpus,tp,pp,weight_dtype,engine,scenario,concurrency,input_tokens,output_tokens,"
            "metric,value,source,notes")
CSV_ROW = "r1,llama-3.1-8b,h100-sxm,1,1,1,bf16,vllm,fixed_concurrency,1,128,128,tpot_ms,7.0,src,"


@SETTINGS
@given(cells=st.lists(st.text(string.printable.replace(",", "").replace("\n", ""), max_size=8), min_size=16,
                      max_size=16), keep=st.lists(st.booleans(), min_size=16, max_size=16))
def test_mutated_validation_csv_gets_a_clean_error(cells, keep, tmp_path):
    good = CSV_ROW.split(",")
    row = ",".join(g if k else c for g, c, k in zip(good, cells, keep))
    check(_validation, tmp_path / "rows.csv", CSV_HEAD + "\n" + row + "\n")


def test_the_study_in_the_issue_is_a_one_line_error(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("model: llama-3.1-8b\nconfigurations: 5\n")
    with pytest.raises(UserError) as exc:
        _study(p)
    assert "configurations" in str(exc.value) and "s.yaml" in str(exc.value) and "line 2" in str(exc.value)
