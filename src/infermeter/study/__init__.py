"""study: one command, a full hardware-comparison study (configurations x workload profiles).

Each cell (configuration x profile) is measured when the configuration names an endpoint or an
engine to launch, and simulated with the twin otherwise; the cells are priced, ranked and written
up as a report whose findings are computed from the numbers::

    from infermeter.study import load_study_text, run_study
    study = load_study_text(open("study.yaml").read(), "study.yaml")
    result = run_study(study, Path("results/study"))
    result.files["html"], [f.text for f in result.findings]

Modules, in data-path order: ``config`` (the study file), ``sweep`` and ``saturation`` (the load
steps of a cell and its steady throughput), ``targets`` (twin or endpoint), ``cells`` (one cell),
``pricing`` (cost, best value, break-even), ``soak``, ``findings``, ``matrix`` / ``tables`` /
``charts`` / ``soakview`` (report pieces), ``report`` and ``runner``.
"""

from infermeter.study.config import StudyConfig, build_study, example_text, load_study_text
from infermeter.study.runner import StudyResult, run_study

__all__ = ["StudyConfig", "StudyResult", "build_study", "example_text", "load_study_text", "run_study"]
