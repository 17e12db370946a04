"""``python -m infermeter.engines.emulator --config JSON --host H --port P``: the emulator child.

Started by :class:`~infermeter.engines.emulator.process.EmulatorProcess`, not by the CLI: the
parent validated the config already. It exits when its stdin closes (the parent went away,
even by SIGKILL) or on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading

from infermeter.engines.emulator.app import serve_forever
from infermeter.engines.emulator.config import API_KEY_ENV, EmulatorConfig
from infermeter.errors import UserError


def _exit_with_stdin() -> None:
    def watch() -> None:
        try:
            sys.stdin.buffer.read()
        finally:
            os._exit(0)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infermeter.engines.emulator")
    ap.add_argument("--config", required=True, help="EmulatorConfig as JSON")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--exit-with-stdin", action="store_true")
    ns = ap.parse_args(argv)
    try:
        cfg = EmulatorConfig.model_validate_json(ns.config)
        if os.environ.get(API_KEY_ENV) and not cfg.api_key:
            cfg = cfg.model_copy(update={"api_key": os.environ[API_KEY_ENV]})
        if ns.exit_with_stdin:
            _exit_with_stdin()
        asyncio.run(serve_forever(cfg, ns.host, ns.port, on_ready=lambda line: print(line, flush=True)))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
