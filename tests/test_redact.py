"""Secret argument values never reach what infermeter writes."""

from infermeter.measure.config import RunConfig
from infermeter.redact import redact_args


def test_secret_flag_values_are_masked_in_both_spellings_and_nothing_else_changes():
    args = ["--port", "8000", "--api-key", "sk-1", "--hf-token=hf_2", "--token", "t3", "--api-key-file", "f"]
    assert redact_args(args) == ["--port", "8000", "--api-key", "***", "--hf-token=***", "--token", "***",
                                 "--api-key-file", "f"]
    assert redact_args(["--api-key"]) == ["--api-key"]  # a flag without its value: nothing to mask
    assert redact_args(()) == []


def test_run_json_config_masks_the_emulators_key():
    cfg = RunConfig(emulator_args=["--api-key", "sk-emu", "--ttft-ms", "5"], api_key="sk-client")
    pub = cfg.public()
    assert pub["api_key"] == "***" and pub["emulator_args"] == ["--api-key", "***", "--ttft-ms", "5"]
