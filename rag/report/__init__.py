"""The final report: the paper's tables as measured (paper), Figure 3, index hot-swap, samples.

``rag.report.build.build_report`` reads exactly the files it is given (``ReportInputs``) and the
passages TSV, and writes the measured tables (CSV) and one self-contained HTML file (inline CSS and
SVG, no scripts; text from data and models escaped by jinja2's autoescape).
"""

from __future__ import annotations

from rag.report.inputs import ReportInputs

__all__ = ["TABLE_KEYS", "ReportInputs"]


TABLE_KEYS = ("table1", "table2", "table5", "table6")
