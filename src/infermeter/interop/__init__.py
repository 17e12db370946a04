"""Other benchmark clients' result files in and out: ``vllm bench serve``, GuideLLM, AIPerf, inference-benchmarker.

Promise: :func:`infermeter.interop.readers.read_file` turns one result file of another tool into
:class:`~infermeter.interop.common.Imported` runs (per-request rows in ``records.ARROW_SCHEMA`` where the
file has per-request data, else the tool's aggregates); :func:`~infermeter.interop.common.write_imported`
writes each as an infermeter run directory whose ``summary.json`` comes from the one summary path
(``analysis.accumulator``), ``source: imported``; :mod:`infermeter.interop.export` writes an infermeter
run in another tool's schema. :data:`~infermeter.interop.definitions.DEFINITIONS` says, per tool, which
metrics it defines differently from infermeter (docs/metrics.md), for ``compare``'s warnings.
"""
