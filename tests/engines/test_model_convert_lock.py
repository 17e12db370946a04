"""Two processes preparing the same model at once: one converts, the other waits and reuses its folder."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from infermeter.engines.models import MODEL_MARKER, GgufModel, prepare_gguf_model

MODEL = GgufModel(name="tiny", package="tiny-pkg", module="tiny_mod", filename="tiny.gguf")


def test_concurrent_preparations_convert_once(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.11" / "site-packages" / "tiny_mod").mkdir(parents=True)
    (venv / "lib" / "python3.11" / "site-packages" / "tiny_mod" / "tiny.gguf").write_bytes(b"GGUF")
    (venv / "bin").mkdir()
    calls = tmp_path / "calls"
    # a stand-in interpreter: `python _convert_gguf.py --gguf G --out OUT --dtype D` writes OUT/config.json slowly
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho run >> {calls}\nsleep 0.5\nmkdir -p "$5"\necho {{}} > "$5/config.json"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    models = tmp_path / "models"
    got: list[Path] = []
    threads = [threading.Thread(target=lambda: got.append(prepare_gguf_model(MODEL, python, models))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert got == [models / "tiny"] * 3
    assert calls.read_text().splitlines() == ["run"]  # converted once; the others found its marker
    assert (models / "tiny" / MODEL_MARKER).exists() and os.path.exists(models / "tiny.lock")
