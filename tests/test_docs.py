"""benchmarks/README.md: a reference of current figures that stays short, its own links resolving."""

import re

from tests.conftest import ROOT

BENCH = ROOT / "benchmarks" / "README.md"


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation but '-' and '_' dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(text: str) -> set[str]:
    found, in_code = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(github_anchor(line.lstrip("#")))
    return found


def test_github_anchor():
    assert github_anchor(" 60-word passages and `retriever.score_scale` 15") == "60-word-passages-and-retrieverscore_scale-15"
    assert github_anchor("`rag index` peak memory (index_build)") == "rag-index-peak-memory-index_build"


def test_benchmarks_readme_is_short():
    assert len(BENCH.read_text().splitlines()) <= 400


def test_links_within_benchmarks_readme_resolve():
    text = BENCH.read_text()
    anchors = headings(text)
    assert not [name for name in re.findall(r"\]\(#([\w-]+)\)", text) if name not in anchors]
    assert {"gpu-at-paper-size", "what-the-default-shows", "800-nq-training-questions"} <= anchors  # the README links them
