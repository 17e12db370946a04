"""``EmulatorConfig``: everything one emulated server needs, declared once.

``infermeter emulate``'s flags, ``run --emulator "..."``, a campaign's or a study's emulator
target and :class:`~infermeter.engines.emulator.process.EmulatorProcess` all build this one
frozen model; the flag names are its field names in kebab case::

    >>> EmulatorConfig.from_args(["--ttft-ms", "20", "--max-concurrency", "4"]).backend
    'simple'
    >>> EmulatorConfig(model="llama-3.1-70b", gpu="4xa100-80gb:tp4").backend
    'twin'

Backends: the digital twin (default: a vLLM-like engine on the performance model, with vLLM's
``/metrics``); ``simple`` (fixed TTFT and time per token, a limit on concurrent generations;
any of its flags selects it); ``zero_delay`` (all tokens at once, for client-capacity tests).
A bad value raises :class:`~infermeter.errors.ConfigError` naming the flag.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from pydantic import Field, ValidationError, field_validator

from infermeter.errors import ConfigError
from infermeter.twin.spec import TwinSpec

SIMPLE_FLAGS = ("ttft_ms", "itl_ms", "max_concurrency")
API_KEY_ENV = "INFERMETER_EMULATOR_API_KEY"  # how the key reaches a child emulator (never its command line)


class EmulatorConfig(TwinSpec):
    """The emulated server's settings: the twin's deployment (:class:`TwinSpec`), then the simple
    backend, speed and faults; see the module docstring (flag = field name, kebab case)."""

    # the twin split into a prefill and a decode pool (docs/disaggregation.md)
    disaggregate: str | None = Field(None, description="disaggregated prefill/decode: prefill=CONFIG,decode=CONFIG[,...] "
                                                       "(docs/disaggregation.md); --gpu is then unused")
    # the simple backend
    simple: bool = Field(False, description="fixed timing instead of the twin")
    ttft_ms: float | None = Field(None, ge=0, description="simple backend: time to first token (ms, default 50)")
    itl_ms: float | None = Field(None, ge=0, description="simple backend: time per output token (ms, default 10)")
    max_concurrency: int | None = Field(None, ge=1, description="simple backend: requests generated at once (default 256)")
    zero_delay: bool = Field(False, description="all tokens at once, pre-rendered (client capacity tests)")
    # both
    speedup: float = Field(1.0, gt=0, description="run K times faster than real time")
    faults: str | None = Field(None, description="inject faults KIND=RATE,...: 429, 500, 503 (HTTP errors), cut (the "
                                                 "stream ends early), stall (silence for --stall-s), malformed (an event "
                                                 "that is not JSON), slow_first_byte (headers after 1 s), reset (the "
                                                 "connection closes); e.g. '429=0.05,500=0.02,cut=0.02'")
    fault_seed: int = Field(0, description="seed of the fault draws")
    stall_s: float = Field(30.0, gt=0, description="length of an injected stall (s)")
    cut_after: int = Field(3, ge=0, description="tokens before an injected stream cut")
    api_key: str | None = Field(None, description="answer 401 to /v1 requests without 'Authorization: Bearer KEY' "
                                                  "(as vLLM's --api-key)")
    reasoning_tokens: str | None = Field(None, description="emulate a reasoning model: stream the first N output tokens "
                                                           "of each request as reasoning_content (N, or "
                                                           "'mean[,stdev[,min,max]]'); max_tokens bounds thinking + answer")

    @field_validator("reasoning_tokens", mode="before")
    @classmethod
    def _thinking(cls, v: Any) -> Any:
        if v is None:
            return None
        from infermeter.engines.emulator.reasoning import ThinkingPlan

        try:
            plan = ThinkingPlan.parse(str(v))
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("--reasoning-tokens: ")) from None
        return None if plan is None else plan.describe()

    @property
    def backend(self) -> str:
        """``twin``, ``simple`` or ``zero-delay``: any simple-backend flag selects the simple backend."""
        if self.zero_delay:
            return "zero-delay"
        if self.simple or any(getattr(self, k) is not None for k in SIMPLE_FLAGS):
            return "simple"
        return "twin"

    @classmethod
    def build(cls, where: str = "emulator", **values: Any) -> EmulatorConfig:
        """Validate ``values``; a ConfigError names the flag (``--ttft-ms: ...``)."""
        try:
            return cls(**values)
        except ValidationError as exc:
            e = exc.errors()[0]
            flag = "--" + str(e["loc"][0]).replace("_", "-") if e["loc"] else where
            raise ConfigError(f"{where}: {flag}: {str(e['msg']).removeprefix('Value error, ')}") from None

    @classmethod
    def from_args(cls, args: list[str] | str, where: str = "--emulator") -> EmulatorConfig:
        """Flags as ``infermeter emulate`` takes them (a list, or one string split like a shell)."""
        argv = shlex.split(args) if isinstance(args, str) else list(args)
        parser = _parser(where)
        try:
            ns = parser.parse_args(argv)
        except _ArgError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return cls.build(where, **{k: v for k, v in vars(ns).items() if v is not None})


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line for the user, never an exit
        raise _ArgError(message)


def _parser(where: str) -> argparse.ArgumentParser:
    p = _Parser(prog=where, add_help=False, allow_abbrev=False)
    for name, f in EmulatorConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if f.annotation is bool:
            p.add_argument(flag, dest=name, action="store_true", default=None)
            p.add_argument("--no-" + name.replace("_", "-"), dest=name, action="store_false")
        else:
            kind = {int: int, float: float}.get(_base_type(f.annotation), str)
            p.add_argument(flag, dest=name, type=kind, default=None)
    return p


def _base_type(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    if args:
        return next((a for a in args if a is not type(None)), str)
    return annotation
