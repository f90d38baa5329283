"""The final report (``rag.report.build.build_report``): the paper's tables as measured, Figure 3, the index
hot-swap, samples; CSV tables and one self-contained HTML file (inline CSS and SVG, text escaped by jinja2).
"""

from __future__ import annotations

from rag.report.inputs import ReportInputs

__all__ = ["TABLE_KEYS", "ReportInputs"]


TABLE_KEYS = ("table1", "table2", "table5", "table6")
