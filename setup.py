"""Build hook. Plain ``pip install .`` / ``pip install -e .`` build pure Python (all metadata is in
pyproject.toml). With ``INFERMETER_MYPYC=1`` the simulation's hot modules are compiled to C
extensions with mypyc (the compiler black and mypy ship their wheels with; it needs ``mypy`` and a
C compiler, and ``--no-build-isolation`` uses the ones installed): the twin's event loop, arrival
sources, engine, KV pool, decode spans, request, level series and router; the performance model's
step-time arithmetic; the synthetic profiles' prompt text and every request's prefix-cache keys.
Same code, same results (floats too: no fused multiply-add), the offline simulator about 2x faster.
``make fast`` builds that into ``.fast/`` here; tests/twin/test_compiled.py checks both builds
write identical summaries.
"""

import os

from setuptools import setup

# the modules compiled: their classes cannot be subclassed or patched by interpreted code, and a
# class that is pickled says how (infermeter.twin.state)
COMPILED = [
    "src/infermeter/twin/engine.py",
    "src/infermeter/twin/kvcache.py",
    "src/infermeter/twin/spans.py",
    "src/infermeter/twin/request.py",
    "src/infermeter/twin/series.py",
    "src/infermeter/twin/loop.py",
    "src/infermeter/twin/sources.py",
    "src/infermeter/twin/router.py",
    "src/infermeter/perfmodel/steptime.py",
    "src/infermeter/workload/pool.py",
    "src/infermeter/workload/compose.py",
    "src/infermeter/workload/synthetic.py",
    "src/infermeter/twin/hashing.py",
]

ext_modules = []
if os.environ.get("INFERMETER_MYPYC") == "1":
    from mypyc.build import mypycify

    ext_modules = mypycify(COMPILED, opt_level="3")
    if os.name != "nt":  # a*b + c stays two roundings, as in Python (GCC contracts it to an FMA where the CPU has one)
        for ext in ext_modules:
            ext.extra_compile_args.append("-ffp-contract=off")

setup(ext_modules=ext_modules)
