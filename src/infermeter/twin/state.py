"""Pickling of the twin's classes that works in both builds (pure Python, or compiled: setup.py).

A checkpoint (``simulate --checkpoint``) and a fleet worker pickle engines, KV pools and cache
groups. mypyc-compiled classes have neither ``__dict__`` nor a ``__new__`` that skips
``__init__``, so a class that is pickled returns ``(cls, init_args, state_of(self))`` from
``__reduce__`` and restores the rest with ``set_state`` in ``__setstate__``::

    def __reduce__(self): return (type(self), (self.num_blocks,), state_of(self))
    def __setstate__(self, state): set_state(self, state)

``init_args`` must not refer back to the object (pickle restores cycles through the state only).
"""

from __future__ import annotations

from typing import Any


def state_of(obj: object) -> dict[str, Any]:
    """Every attribute of ``obj``: its compiled attributes, or its ``__dict__`` and ``__slots__``."""
    cls = type(obj)
    names: list[str] = list(getattr(cls, "__mypyc_attrs__", ()))
    if not names:
        names = list(getattr(obj, "__dict__", {}))
        for c in cls.__mro__:
            names.extend(s for s in c.__dict__.get("__slots__", ()) if s not in ("__dict__", "__weakref__"))
    missing = object()
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(obj, name, missing)
        if value is not missing:
            out[name] = value
    return out


def set_state(obj: object, state: dict[str, Any]) -> None:
    """Restore what :func:`state_of` took."""
    for name, value in state.items():
        setattr(obj, name, value)
