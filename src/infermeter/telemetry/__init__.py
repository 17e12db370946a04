"""What the server and the GPU did during a run, on the run's clock.

* :mod:`~infermeter.telemetry.scraper` — ``MetricsScraper``: poll ``/metrics``, map engine names
  (:mod:`~infermeter.telemetry.adapters`) onto common signals, summarize, write parquet.
* :mod:`~infermeter.telemetry.gpu` — ``GpuSampler``: NVML or a DCGM exporter
  (:mod:`~infermeter.telemetry.gpu_sources`); temperature, throttling, energy per token.
* :mod:`~infermeter.telemetry.exposition` — the Prometheus text parser (no prometheus_client needed).
"""
