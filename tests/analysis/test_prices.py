"""Price catalog: coverage of the named providers, offer choice, overrides, discounts, errors."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from infermeter.analysis.prices import PriceOptions, load_catalog, resolve_price, staleness_warnings
from infermeter.errors import ConfigError, DataError
from infermeter.perfmodel.configspec import parse_config

TODAY = dt.date(2026, 11, 29)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_every_offer_is_sourced_and_dated(catalog):
    for o in catalog.offers:
        assert o.source.strip(), o
        assert o.date is not None or o.date_note, o
        assert o.gpu_usd_per_hour > 0


@pytest.mark.parametrize("provider,instance,gpu,gpus,usd", [
    ("azure", "Standard_ND96isr_H100_v5", "h100-sxm", 8, 98.32),
    ("azure", "Standard_NC24ads_A100_v4", "a100-80gb", 1, 3.673),
    ("aws", "p5.48xlarge", "h100-sxm", 8, 55.04),
    ("aws", "p4d.24xlarge", "a100-40gb", 8, 21.957642),
    ("aws", "g5.xlarge", "a10g", 1, 1.006),
    ("gcp", "a3-highgpu-8g", "h100-sxm", 8, 87.83),
    ("gcp", "a2-highgpu-8g", "a100-40gb", 8, 29.387),
    ("gcp", "g2-standard (L4)", "l4", 1, 0.56004),
    ("lambda", "gpu_8x_h100_sxm5", "h100-sxm", 8, 31.92),
    ("lambda", "gpu_8x_a100_80gb_sxm4", "a100-80gb", 8, 22.32),
    ("runpod", "RTX 4090 (Secure Cloud)", "rtx-4090", 1, 0.74),
    ("vastai", "RTX 4090 (median)", "rtx-4090", 1, 0.40),
    ("vultr", "Cloud GPU L40S", "l40s", 1, 1.67),
])
def test_named_offers_carry_the_researched_price(catalog, provider, instance, gpu, gpus, usd):
    [offer] = [o for o in catalog.offers if (o.provider, o.instance) == (provider, instance)]
    assert (offer.gpu, offer.gpus) == (gpu, gpus)
    assert offer.unit_usd_per_hour == pytest.approx(usd)


def test_per_gpu_billing_picks_the_cheapest_node_that_holds_the_tp_group(catalog):
    # NC24ads (1 GPU) cannot hold tp4; ND96amsr 32.77/8 x 4 = 16.385 beats NC96ads 19.108.
    p = catalog.choose(parse_config("4xa100-80gb:tp4"), provider="azure")
    assert p.instance == "Standard_ND96amsr_A100_v4"
    assert p.usd_per_hour == pytest.approx(16.385)
    assert any("sold as 8-GPU instances" in n for n in p.notes)
    assert dict(p.references) == {"SP-AZ": "github.com/skypilot-org/skypilot-catalog catalogs/v6/azure/vms.csv "
                                           "@098741e70562f65d7af1cceb81e33b284f742604"}
    single = catalog.choose(parse_config("a100-80gb"), provider="azure")
    assert (single.instance, single.usd_per_hour) == ("Standard_NC24ads_A100_v4", pytest.approx(3.673))


def test_whole_instances_round_up_to_whole_machines(catalog):
    p = catalog.choose(parse_config("4xa100-80gb:tp4"), provider="azure", whole_instances=True)
    assert (p.instance, p.usd_per_hour, p.billing) == ("Standard_NC96ads_A100_v4", pytest.approx(19.108), "whole-instance")
    two = catalog.choose(parse_config("2xh100-sxm:tp2"), provider="aws", whole_instances=True)
    assert two.usd_per_hour == pytest.approx(55.04)  # a p5.48xlarge, though only 2 of 8 GPUs are used


def test_default_choice_ignores_marketplace_and_community_prices(catalog):
    assert catalog.choose(parse_config("rtx-4090")).provider == "runpod"
    assert catalog.choose(parse_config("rtx-4090"), provider="vastai").usd_per_hour == pytest.approx(0.40)


def test_gap_and_unknowns_are_named(catalog):
    with pytest.raises(ConfigError, match=r"'azure' has no price for 'h200' \(ND H200 v5: no dated public price"):
        catalog.choose(parse_config("h200"), provider="azure")
    with pytest.raises(ConfigError, match=r"hardware 'tpu-v9' \(in '2xtpu-v9:tp2'\) has no price"):
        catalog.choose(parse_config("2xtpu-v9"))
    with pytest.raises(ConfigError, match=r"--provider 'acme': unknown"):
        catalog.choose(parse_config("h100-sxm"), provider="acme")
    with pytest.raises(ConfigError, match=r"needs 16 GPUs in one node for tp16"):
        catalog.choose(parse_config("16xh100-sxm:tp16"), provider="aws")


def test_command_line_prices_skip_the_catalog_and_are_dated_today():
    p = resolve_price(parse_config("4xa100-80gb"), PriceOptions(price_per_hour=16.28), today=TODAY)
    assert (p.usd_per_hour, p.usd_per_gpu_hour, p.date) == (16.28, 4.07, TODAY)
    assert p.source == "--price-per-hour on the command line"
    g = resolve_price(parse_config("8xa10g:tp4,pp2"), PriceOptions(price_per_gpu_hour=1.52), today=TODAY)
    assert g.usd_per_hour == pytest.approx(12.16)


@pytest.mark.parametrize("kwargs,match", [
    ({"price_per_hour": -1.0}, r"--price-per-hour -1.0: a price must be positive"),
    ({"price_per_gpu_hour": 0.0}, r"--price-per-gpu-hour 0.0: a price must be positive"),
    ({"price_per_hour": 2.0, "price_per_gpu_hour": 1.0}, r"give one, not both"),
    ({"discount": 1.5}, r"--discount 1.5"),
])
def test_bad_price_flags_name_the_flag(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        PriceOptions(**kwargs)


def test_commitments_and_discounts_lower_the_price(catalog):
    cfg = parse_config("8xh100-sxm")
    p = resolve_price(cfg, PriceOptions(provider="aws", commitment="1yr-no-upfront"), catalog)
    assert p.usd_per_hour == pytest.approx(55.04 * 0.63)
    assert p.list_usd_per_hour == pytest.approx(55.04) and p.discount == 0.37
    d = resolve_price(cfg, PriceOptions(provider="aws", discount=0.25), catalog)
    assert d.usd_per_hour == pytest.approx(41.28)
    with pytest.raises(ConfigError, match=r"--commitment 'forever': aws offers 1yr-all-upfront, 1yr-no-upfront"):
        resolve_price(cfg, PriceOptions(provider="aws", commitment="forever"), catalog)
    with pytest.raises(ConfigError, match=r"gcp offers none in the catalog \(use --discount\)"):
        resolve_price(cfg, PriceOptions(provider="gcp", commitment="1yr"), catalog)


def test_override_file_replaces_and_adds_offers(tmp_path: Path):
    f = tmp_path / "mine.yaml"
    f.write_text("""schema_version: 1
offers:
  - {provider: azure, instance: Standard_ND96isr_H200_v5, gpu: h200, gpus: 8, usd_per_hour: 80.0, date: 2026-11-20}
  - {provider: aws, instance: p5.48xlarge, gpu: h100-sxm, gpus: 8, usd_per_hour: 40.0, date: 2026-11-21, source: quote}
""")
    cat = load_catalog(overrides=f)
    h200 = cat.choose(parse_config("8xh200"), provider="azure")
    assert (h200.usd_per_hour, h200.source, h200.date) == (80.0, str(f), dt.date(2026, 11, 20))
    assert cat.choose(parse_config("8xh100-sxm"), provider="aws").usd_per_hour == 40.0
    assert not [g for g in cat.gaps if (g.provider, g.gpu) == ("azure", "h200")]


@pytest.mark.parametrize("offer,match", [
    ("{provider: x, instance: y, gpu: h100-sxm, gpus: 1, usd_per_hour: -2, date: 2026-01-01}",
     r"offers\.0 \(x y\): Value error, usd_per_hour must be a positive price, got -2"),
    ("{provider: x, instance: y, gpu: h100-sxm, gpus: 1, usd_per_hour: 2, date: null}",
     r"offers\.0 \(x y\): Value error, date is null"),
    ("{provider: x, instance: y, gpu: h100-sxm, gpus: 1, date: 2026-01-01}",
     r"give usd_per_hour or usd_per_gpu_hour"),
])
def test_bad_override_files_name_the_file_and_offer(tmp_path: Path, offer, match):
    f = tmp_path / "bad.yaml"
    f.write_text(f"schema_version: 1\noffers:\n  - {offer}\n")
    # the file, the line of the offer and the field
    with pytest.raises(DataError, match=rf"price file {f}: line 3: {match}" if "offers" in match else match):
        load_catalog(overrides=f)


def test_missing_override_file_is_named(tmp_path: Path):
    with pytest.raises(DataError, match=r"--prices .*nope.yaml: cannot read"):
        load_catalog(overrides=tmp_path / "nope.yaml")


def test_staleness_warnings_flag_undated_and_old_prices(catalog):
    undated = catalog.choose(parse_config("4xa100-80gb:tp4"), provider="azure")
    old = catalog.choose(parse_config("l40s"), provider="vultr")  # dated 2025-08-12
    fresh = catalog.choose(parse_config("8xh100-sxm"), provider="aws")
    warnings = staleness_warnings([undated, old, fresh], TODAY)
    assert warnings == [
        "price for 4xa100-80gb:tp4 is undated (SkyPilot legacy v6 catalog, commit 098741e7): check it before relying on it",
        "price for l40s is dated 2025-08-12, 474 days ago: it may be stale",
    ]
