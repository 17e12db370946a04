"""infermeter: measure, model and price LLM serving.

Data flows one way through the subpackages:
``workload`` (what to send) -> ``load`` (when) -> ``client`` (how) -> ``records``
(per-request facts) -> ``analysis`` (metrics, cost, capacity) -> ``report``.
Beside them: ``perfmodel`` (hardware/model catalogs, roofline), ``twin`` (engine
simulation), ``telemetry`` (server metrics, GPU sampling), ``engines`` (real servers).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
