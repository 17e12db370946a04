"""workload: what to send -- profiles, datasets, tokenizers and exact-length prompt text.

Public surface::

    from infermeter.workload import build_workload, RequestSpec, Workload
    wl = build_workload(profile="chat", seed=0)
    for spec in itertools.islice(wl.requests(), 100): ...
"""

from infermeter.workload.build import build_workload
from infermeter.workload.lengths import LengthDist
from infermeter.workload.profiles import PROFILES, profile_table
from infermeter.workload.spec import RequestSpec, Workload
from infermeter.workload.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "PROFILES",
    "LengthDist",
    "RequestSpec",
    "Tokenizer",
    "Workload",
    "build_workload",
    "load_tokenizer",
    "profile_table",
]
