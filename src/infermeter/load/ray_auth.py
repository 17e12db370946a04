"""Ray token authentication for ``--ray``: the mode decided before Ray is imported, failures said in one line.

Ray (2.52 and later) authenticates clients with a static token when a cluster runs with
``RAY_AUTH_MODE=token``; a driver must then run in token mode too, with the token in
``RAY_AUTH_TOKEN``, in the file ``RAY_AUTH_TOKEN_PATH`` names, or in ``~/.ray/auth_token``.
Ray reads the mode once, when it is imported, and enables it by itself only for
``address="auto"``. So, before the import (:func:`prepare`):

- ``RAY_AUTH_MODE`` set by the user: kept as it is;
- a token available and a cluster address given (not ``local``): a short probe in a child
  process (``ray.init`` without a token) tells whether the cluster refuses unauthenticated
  clients; if it does, ``RAY_AUTH_MODE=token`` is set for this process, so a token that the
  user gave is passed through as Ray documents;
- otherwise nothing changes.

:func:`connecting` wraps ``ray.init`` for a cluster address: Ray's own retry window is cut to
:data:`CONNECT_WAIT_S` and its native log lines (one authentication warning a second) are held
back; :func:`failure_hint` turns what they said into the one line the user needs. The token's
value is never printed or written: messages name where a token was looked for, not what it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

MODE = "RAY_AUTH_MODE"
TOKEN = "RAY_AUTH_TOKEN"
TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
# Ray's connect window (RAY_gcs_server_port_wait_time_s: tries about a second apart; 20 by default)
WAIT_ENV = "RAY_gcs_server_port_wait_time_s"
CONNECT_WAIT_S = 5
PROBE_TIMEOUT_S = 60.0
# what Ray's client logs when the cluster refuses its token (or the lack of one)
AUTH_REFUSED = ("InvalidAuthToken", "Unauthenticated", "Authentication token is missing or incorrect")
_PROBE = ("import sys, ray\n"
          "ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False, logging_level='ERROR')\n"
          "print('connected')\n")


def token_source(env: Mapping[str, str] | None = None, home: Path | None = None) -> str | None:
    """Where a Ray token is available (its name, never its value), or None."""
    env = os.environ if env is None else env
    if env.get(TOKEN):
        return TOKEN
    if env.get(TOKEN_PATH):
        return f"{TOKEN_PATH} ({env[TOKEN_PATH]})"
    default = (Path.home() if home is None else home) / ".ray" / "auth_token"
    return "~/.ray/auth_token" if default.is_file() else None


def refused(log: str) -> bool:
    """True when Ray's log says the cluster refused the client's authentication."""
    return any(s in log for s in AUTH_REFUSED)


def probe_refuses(address: str, env: Mapping[str, str] | None = None) -> bool | None:
    """Connect to ``address`` from a child process with token authentication off.

    True: the cluster refused (it uses token authentication); False: it connected;
    None: it failed for another reason (unreachable, Ray missing), left to the real connect."""
    child = {**(os.environ if env is None else env), MODE: "disabled", WAIT_ENV: str(CONNECT_WAIT_S)}
    try:
        res = subprocess.run([sys.executable, "-c", _PROBE, address], env=child, capture_output=True,
                             text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode == 0 and "connected" in res.stdout:
        return False
    return True if refused(res.stderr) else None


def prepare(address: str) -> None:
    """Decide ``RAY_AUTH_MODE`` for this process before Ray is imported (see the module docstring)."""
    if address == "local" or MODE in os.environ or "ray" in sys.modules or token_source() is None:
        return
    if probe_refuses(address):
        os.environ[MODE] = "token"


def failure_hint(address: str, log: str) -> str:
    """The one line to add to a failed connect: what to set when authentication was refused."""
    if not refused(log):
        return ""
    source, mode = token_source(), os.environ.get(MODE)
    if mode is not None and mode.lower() != "token":
        return (f"the cluster at {address} uses token authentication and this process runs with {MODE}={mode}: "
                f"set {MODE}=token and {TOKEN} (`ray get-auth-token` on the head node prints it)")
    if source is None:
        return (f"the cluster at {address} uses token authentication and no token was given: set {TOKEN} "
                f"(`ray get-auth-token` on the head node prints it)")
    return f"the cluster at {address} refused the token from {source}: check it against `ray get-auth-token` on the head node"


@contextmanager
def connecting(log: list[str]) -> Iterator[None]:
    """Around ``ray.init`` to a cluster: a short connect window, Ray's native stderr held back.

    What Ray wrote to stderr meanwhile is appended to ``log`` (as one string) and echoed back,
    less its authentication refusals, which :func:`failure_hint` sums up in one line instead."""
    saved_wait = os.environ.get(WAIT_ENV)
    if saved_wait is None:
        os.environ[WAIT_ENV] = str(CONNECT_WAIT_S)
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            if saved_wait is None:
                os.environ.pop(WAIT_ENV, None)
            held.seek(0)
            text = held.read().decode("utf-8", "replace")
            log.append(text)
            rest = "".join(line for line in text.splitlines(keepends=True) if not refused(line))
            if rest.strip():
                sys.stderr.write(rest)
