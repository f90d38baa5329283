"""The final report: the paper's tables as measured (paper), Figure 3, index hot-swap, samples.

``rag.report.build.build_report`` reads exactly the files it is given (``ReportInputs``: the per-run
``metrics.json`` and ``predictions.jsonl`` files, the top-K, oracle and hot-swap experiment files)
and the passages TSV, never a directory listing; it writes ``table1.csv``, ``table2.csv``,
``table5.csv`` and ``table6.csv`` (measured numbers) and one self-contained HTML file (inline CSS
and SVG, no scripts, no external resources). All text from data and models is escaped by
jinja2's autoescape. Heavy imports (pandas, jinja2, yaml) happen inside the functions.
"""

from __future__ import annotations

from rag.report.inputs import ReportInputs

__all__ = ["TABLE_KEYS", "ReportInputs"]


TABLE_KEYS = ("table1", "table2", "table5", "table6")
