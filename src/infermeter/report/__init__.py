"""report: turn result directories into pages, tables, comparisons and a history.

``build.build_report`` writes report.html / report.md / summary.csv; ``history``
indexes runs in DuckDB (``index_run``) and queries them. Modules import from
``analysis`` and below, never the other way.
"""
