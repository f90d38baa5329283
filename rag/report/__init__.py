"""The final report: the paper's tables as measured (paper), Figure 3, index hot-swap, samples.

``build_report`` reads exactly the files it is given (``ReportInputs``: the per-run
``metrics.json`` and ``predictions.jsonl`` files, the top-K, oracle and hot-swap experiment files)
and the passages TSV, never a directory listing; it writes ``table1.csv``, ``table2.csv``,
``table5.csv`` and ``table6.csv`` (measured numbers) and one self-contained HTML file (inline CSS
and SVG, no scripts, no external resources). All text from data and models is escaped by
jinja2's autoescape. Heavy imports (pandas, jinja2, yaml) happen inside the functions.
"""

from __future__ import annotations

from pathlib import Path

from rag.report.inputs import ReportInputs

__all__ = ["TABLE_KEYS", "ReportInputs", "build_report"]


TABLE_KEYS = ("table1", "table2", "table5", "table6")


def build_report(
    inputs: ReportInputs,
    passages: Path | None,
    scale: dict,
    out_html: Path,
    tables: dict[str, Path],
    tracking_url: str = "http://127.0.0.1:5000",
    samples_per_task: int = 20,
    tasks: list[str] | None = None,
    variants: list[str] | None = None,
) -> None:
    """Write the measured tables (CSV) to ``tables`` (key ``table1`` ... -> file) and the HTML
    report ``out_html``, from exactly the files ``inputs`` names (``ReportInputs.from_files``).

    Missing metrics render as an en dash; every measured number links to
    ``{tracking_url}/#/experiments/{experiment_id}/runs/{run_id}``.
    """
    from rag.report.build import build_report as _build

    _build(
        inputs=inputs,
        passages=Path(passages) if passages is not None else None,
        scale=scale,
        out_html=Path(out_html),
        tables={k: Path(v) for k, v in tables.items()},
        tracking_url=tracking_url,
        samples_per_task=samples_per_task,
        tasks=tasks,
        variants=variants,
    )
