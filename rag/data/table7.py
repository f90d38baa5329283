"""The paper's Table 7 (dataset sizes) against the examples a converted task file holds: each
task's row is its registry entry's ``table7_row`` (``rag/tasks.py``), the counts come from
``rag/data/paper_results.yaml``."""

from __future__ import annotations

from rag.tasks import TASKS


def table7_rows() -> dict[str, str]:
    """task -> its row of Table 7, for the registered tasks that have one."""
    return {name: spec.table7_row for name, spec in TASKS.items() if spec.table7_row}


def table7() -> dict[str, dict[str, int]]:
    """Paper Table 7 dataset sizes: ``{task: {"train": n, "dev": n, "test": n}}``."""
    from rag.data import paper_results

    table = paper_results()["table7"]
    return {task: dict(zip(table["columns"], table["rows"][row])) for task, row in table7_rows().items()}


def check_counts(task: str, split: str, n: int) -> str | None:
    """A warning when ``n`` differs from the paper's Table 7 count for ``task``/``split``, else None
    (also for a task Table 7 has no row for). A task whose registry entry has a ``table7_offset``
    may hold that many examples fewer than Table 7 lists."""
    expected = table7().get(task, {}).get(split)
    if expected is None or n == expected:
        return None
    offset = TASKS[task].table7_offset
    if offset and n == expected - offset:
        return None
    return (
        f"{task} {split}: {n} examples, but Table 7 of Lewis et al. (2020) lists {expected} "
        f"({n - expected:+d}); check the source file and split"
    )
