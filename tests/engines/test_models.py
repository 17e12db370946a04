"""prepare_gguf_model: converts once, and concurrent callers never convert into one folder at the same time."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from infermeter.engines import models
from infermeter.engines.venv import EngineError

FAKE = models.GgufModel(name="tiny", package="tiny-pkg", module="tiny_pkg", filename="tiny.gguf")


def _fake_venv(tmp_path: Path, body: str) -> Path:
    """A venv layout holding the GGUF file, whose 'python' is a shell script standing in for the converter."""
    venv = tmp_path / "venv"
    pkg = venv / "lib" / "python3.11" / "site-packages" / FAKE.module
    pkg.mkdir(parents=True)
    (pkg / FAKE.filename).write_bytes(b"GGUF" + bytes(60))
    py = venv / "bin" / "python"
    py.parent.mkdir(parents=True)
    # argv: CONVERTER --gguf G --out OUT --dtype D
    py.write_text("#!/bin/sh\nout=$5\n" + body)
    py.chmod(0o755)
    return py


def test_concurrent_callers_convert_once_and_all_get_the_folder(tmp_path):
    count = tmp_path / "conversions"
    py = _fake_venv(tmp_path, f'echo x >> {count}\nmkdir -p "$out"\nsleep 0.5\necho {{}} > "$out/config.json"\n')
    # a killed conversion's leftovers are cleared before converting
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / ".tmpABC").write_bytes(b"half")
    results: list[object] = []

    def call() -> None:
        try:
            results.append(models.prepare_gguf_model(FAKE, py, tmp_path / "models"))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            results.append(exc)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [tmp_path / "models" / "tiny"] * 3
    assert count.read_text().count("x") == 1
    marker = json.loads((tmp_path / "models" / "tiny" / models.MODEL_MARKER).read_text())
    assert marker["source"] == {"gguf": "tiny.gguf", "size": 64, "dtype": "bfloat16"}
    assert not (tmp_path / "models" / "tiny" / ".tmpABC").exists()
    # converted: the next call returns at once without running the converter
    models.prepare_gguf_model(FAKE, py, tmp_path / "models")
    assert count.read_text().count("x") == 1


def test_a_failed_conversion_names_its_log_and_leaves_no_marker(tmp_path):
    py = _fake_venv(tmp_path, 'echo "conversion failed: out of cheese"\nexit 3\n')
    with pytest.raises(EngineError, match=r"(?s)tiny.gguf exited 3 \(log: .*tiny.convert.log\).*out of cheese"):
        models.prepare_gguf_model(FAKE, py, tmp_path / "models")
    assert not (tmp_path / "models" / "tiny" / models.MODEL_MARKER).exists()
