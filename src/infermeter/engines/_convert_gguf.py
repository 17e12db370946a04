"""Dequantize a GGUF checkpoint into a Hugging Face safetensors folder (runs in the engine venv).

Standalone script, executed with the engine's own interpreter (it imports
transformers/gguf/accelerate, which the infermeter package itself does not
need):

    ENGINE_VENV/bin/python _convert_gguf.py --gguf /path/model.gguf --out DIR [--dtype bfloat16]

Writes ``config.json``, ``model.safetensors``, ``generation_config.json`` and
the tokenizer files into ``DIR`` (via a temporary sibling folder renamed into
place, so a crash never leaves a half-written model). The GGUF
``quantization_config`` is dropped from the config so loaders treat the
weights as plain dense tensors. Exit code 0 on success; any failure prints the
reason on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys


def convert(gguf: str, out: str, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(os.path.abspath(gguf))
    tmp = out.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    kwargs = {"gguf_file": name, "dtype": getattr(torch, dtype)}
    try:  # newer transformers keep GGUF blocks packed unless told to dequantize
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=name, dequantize=True)
    except ImportError:  # older transformers always dequantize GGUF weights
        pass
    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    try:
        convert(args.gguf, args.out, args.dtype)
    except Exception as exc:  # noqa: BLE001 - report any failure as one line
        print(f"conversion failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
