"""Campaigns: a matrix of targets (URLs or engines with arguments) x profiles x loads x repeats.

    campaign = load_campaign("campaign.yaml")          # validated, cells in run order
    report = CampaignRunner(campaign, Path("results/c1")).run()

Modules: ``spec`` (the YAML file), ``targets`` (engines, health, prefix-cache
reset, logs), ``state`` (resume), ``runner`` (the matrix), ``spread`` (the report).
"""

from __future__ import annotations

from infermeter.campaign.runner import CampaignRunner
from infermeter.campaign.spec import Campaign, Cell, load_campaign
from infermeter.engines.target import Target

__all__ = ["Campaign", "CampaignRunner", "Cell", "Target", "load_campaign"]
