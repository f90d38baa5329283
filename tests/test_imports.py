"""The package's layout and imports: light commands and Snakemake's own process import no torch,
transformers or MLflow; no import circle among the ``rag`` modules; no two modules (or a module
and a package) in ``rag/`` share a basename.

Import circles are read from the source with ``ast``: an edge A -> B for every ``import B`` /
``from B import name`` of a ``rag`` module B in A (and A -> B.name where that is a module).
- An import at module level (also inside a class body, ``if``/``try`` at module level) runs
  while A is being imported: a circle of those fails (one of its modules would be seen half
  initialised). ``if TYPE_CHECKING:`` imports never run and are left out.
- A function-level (lazy) import runs when the function is called, after both modules finished
  importing; lazy imports are how commands keep torch out of processes that do not need it. They
  still state a dependency, and no circle may close through them either: counting them, the
  modules form no circle at all (the layers: cli -> stages -> models, retrieval, data, report ->
  the shared modules).
- ``importlib.import_module`` (the CLI's command groups, the retriever registry) names its module
  in a string: not an edge.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import ROOT

HEAVY = ("torch", "transformers", "mlflow")
PACKAGE = ROOT / "rag"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def import_edges() -> dict[str, dict[str, str]]:
    """module -> {imported rag module: "module" (runs at import) | "lazy" (inside a function)}."""
    edges: dict[str, dict[str, str]] = {m: {} for m in MODULES}

    def targets(node) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if node.level or not node.module:  # no relative imports in rag/; nothing to resolve
            return []
        return [node.module] + [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES]

    for name, path in MODULES.items():
        def visit(node, kind):
            for child in ast.iter_child_nodes(node):
                k = kind
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    k = "lazy"
                elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for t in targets(child):
                        if t in MODULES and t != name and edges[name].get(t) != "module":
                            edges[name][t] = k
                visit(child, k)

        visit(ast.parse(path.read_text(encoding="utf-8")), "module")
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in graph:
        if v not in index:
            strong(v)
    return out


def test_the_import_graph_sees_the_imports():
    edges = import_edges()
    assert edges["rag.cli.training_commands"]["rag.cli.task_args"] == "module"
    assert edges["rag.cli.training_commands"]["rag.stages.fine_tuning"] == "lazy"
    assert edges["rag.stages.evaluation"]["rag.predictions"] == "module"
    assert edges["rag.retrieval"]["rag.tasks"] == "lazy"  # in build_retriever
    assert "rag.retrieval.base" not in edges["rag.retrieval"]  # imported only under TYPE_CHECKING: left out


def test_no_import_circle_at_module_level():
    edges = import_edges()
    graph = {m: {t for t, kind in e.items() if kind == "module"} for m, e in edges.items()}
    assert cycles(graph) == []


def test_no_import_circle_counting_lazy_imports():
    edges = import_edges()
    graph = {m: set(e) for m, e in edges.items()}
    assert cycles(graph) == [], "import circles (counting function-level imports)"


def test_the_circle_check_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_two_modules_share_a_basename():
    """Modules and packages inside rag/ (not __init__ / __main__; the top package rag itself aside)."""
    names = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            names[path.stem].append(str(path.relative_to(ROOT)))
    for init in PACKAGE.rglob("__init__.py"):
        if init.parent != PACKAGE:
            names[init.parent.name].append(str(init.parent.relative_to(ROOT)) + "/")
    shared = {name: paths for name, paths in names.items() if len(paths) > 1}
    assert shared == {}


def _package(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def private_imports() -> list[str]:
    """``A: B._name`` for every private name (a leading underscore) module A imports from a ``rag``
    module B of another package."""
    out = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in MODULES and _package(node.module) != _package(name):
                out += [f"{name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return out


def test_no_private_name_imported_across_packages():
    """A package's private names stay in it: what another package needs is public."""
    assert private_imports() == []


def _loaded(code: str, *args: str, cwd: Path = ROOT) -> list[str]:
    """The HEAVY modules loaded when ``code`` (Python run in a fresh process) ends."""
    probe = ("import atexit, json, sys\n"
             f"atexit.register(lambda: print('LOADED', json.dumps([m for m in {HEAVY!r} if m in sys.modules])))\n")
    res = subprocess.run([sys.executable, "-c", probe + code, *args], capture_output=True, text=True, cwd=cwd,
                         timeout=300)
    lines = [line for line in res.stdout.splitlines() if line.startswith("LOADED ")]
    assert lines, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    return json.loads(lines[-1][len("LOADED "):])


def test_rag_help_imports_no_torch_transformers_or_mlflow():
    code = "import sys\nfrom rag.cli import main\nsys.argv[0] = 'rag'\nmain(['--help'])\n"
    assert _loaded(code) == []


@pytest.fixture(scope="module")
def small_inputs(tmp_path_factory):
    """The config sections of tests/data/e2e.yaml, a 4-passage corpus and its (random) embeddings."""
    import numpy as np

    from rag.config import load_config, sections
    from rag.io import write_json

    folder = tmp_path_factory.mktemp("light")
    for name, section in sections(load_config(ROOT / "tests/data/e2e.yaml", check_files=False)).items():
        write_json(folder / f"{name}.json", section)
    rows = ["id\ttitle\ttext"] + [f"p{i}\tTitle {i}\tpassage number {i} about the river" for i in range(4)]
    (folder / "passages.tsv").write_text("\n".join(rows) + "\n")
    (folder / "p.jsonl").write_text('{"id": "1", "prediction": "Paris"}\n')
    (folder / "r.jsonl").write_text('{"id": "1", "targets": ["paris"]}\n')
    (folder / "docs.jsonl").write_text('{"id": "d1", "title": "T", "text": "some words here and there"}\n')
    np.save(folder / "emb.npy", np.random.default_rng(0).standard_normal((4, 8)).astype("float32"))
    return folder


LIGHT = {  # command -> its arguments (f: the small_inputs folder); none of them runs a model
    "corpus": "corpus --config {f}/corpus.json --out {f}/c.tsv --restatements {f}/re.jsonl",
    "tasks": "tasks --config {f}/data_nq.json --out-train {f}/tr.jsonl --out-dev {f}/dv.jsonl --out-test {f}/te.jsonl",
    "hotswap-data": "hotswap-data --config {f}/corpus.json --out {f}/hs.jsonl",
    "prepare-corpus": "prepare-corpus --format jsonl --input {f}/docs.jsonl --output {f}/pc.tsv",
    "bm25": "bm25 --passages {f}/passages.tsv --out {f}/bm25",
    "index": "index --config {f}/index.json --embeddings {f}/emb.npy --out {f}/flat.faiss --stats {f}/stats.json",
    "score": "score --metric em --predictions {f}/p.jsonl --references {f}/r.jsonl",
}  # rag plan imports torch: it counts a fine-tune's parameters and probes its activations (rag.models.sizing)


@pytest.mark.parametrize("command", sorted(LIGHT))
def test_light_commands_import_no_torch(small_inputs, command):
    args = LIGHT[command].format(f=small_inputs).split()
    code = "import sys\nfrom rag.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    assert _loaded(code, *args) == [], command


SNAKEMAKE_PROBE = r"""
import json, os, sys
out = sys.argv[1]
sys.argv = ["snakemake", *sys.argv[2:]]
exit_ = os._exit

def report(code=0):  # snakemake ends with os._exit: no atexit
    with open(out, "w") as fh:
        json.dump([m for m in ("torch", "transformers", "mlflow", "faiss") if m in sys.modules], fh)
    exit_(code)

os._exit = report
from snakemake.cli import main
try:
    main()
finally:
    report(0)
"""


def test_snakemakes_own_process_imports_no_torch_transformers_or_mlflow(tmp_path):
    """Snakemake parses the Snakefile (workflow/rules/common.smk imports rag.config, rag.retrieval,
    rag.tasks) in its own process, for every run: it must stay light. A dry run of the
    default config, and the rag modules a rule's ``run:`` block imports there."""
    out = tmp_path / "loaded.json"
    res = subprocess.run([sys.executable, "-c", SNAKEMAKE_PROBE, str(out), "-s", str(ROOT / "Snakefile"), "--directory",
                          str(tmp_path), "-n", "--cores", "2", "-q", "--configfile", str(ROOT / "config.yaml")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and out.exists(), res.stderr[-3000:]
    assert json.loads(out.read_text()) == []
    named = set()
    for smk in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]:
        for line in smk.read_text().splitlines():
            words = line.split()
            if len(words) > 1 and words[0] in ("from", "import") and words[1].startswith("rag"):
                named.add(words[1])
    assert "rag.config" in named
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    assert _loaded(code, *sorted(named)) == []


def test_importing_rag_sets_mkls_reproducibility_conditions_before_torch():
    """``import rag`` sets MKL_CBWR, MKL_DYNAMIC and OMP_DYNAMIC (Intel's conditions for run-to-run
    reproducible MKL results) unless the user did, and imports no torch doing it: MKL and OpenMP read
    them when loaded, so they must be set before."""
    import os

    from rag import REPRODUCIBLE_ENV

    assert set(REPRODUCIBLE_ENV) == {"MKL_CBWR", "MKL_DYNAMIC", "OMP_DYNAMIC"}
    code = "import json, os, sys, rag; print(json.dumps([{k: os.environ.get(k) for k in rag.REPRODUCIBLE_ENV}, 'torch' in sys.modules]))"
    bare = {k: v for k, v in os.environ.items() if k not in REPRODUCIBLE_ENV}
    for given, expected in [({}, REPRODUCIBLE_ENV), ({"MKL_CBWR": "COMPATIBLE"}, {**REPRODUCIBLE_ENV, "MKL_CBWR": "COMPATIBLE"})]:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=bare | given, cwd=ROOT, check=True)
        assert json.loads(out.stdout) == [expected, False]
