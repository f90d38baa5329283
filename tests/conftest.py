import json
import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def section_type(name: str):
    """The typed class (rag.sections) of the section ``name`` (corpus, data_nq, train_nq, ...);
    None for the report's, which no stage reads, and a further retriever's (retriever_<name>, and reranker_<name>
    for rule train_reranker: its declarations, which rag.sections.read_task_sections attaches to a train section)."""
    from rag import sections as S

    kinds = {"corpus": S.CorpusSection, "encode": S.EncodeSection, "index": S.IndexSection,
             "generator": S.GeneratorSection, "experiments": S.ExperimentsSection, "data": S.DataSection,
             "train": S.TrainSection, "eval": S.EvalSection, "report": None, "retriever": None, "reranker": None}
    return kinds[name] if name in kinds else kinds[name.split("_")[0]]


def _merged(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for key, value in overrides.items():
        out[key] = _merged(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def typed_sections(overrides: dict | None = None, config: Path = ROOT / "config.yaml") -> dict:
    """The typed sections a stage takes, of ``config`` with ``overrides`` merged in (nested
    mappings key by key): what the commands read from results/<name>/config/. ``train_<task>``
    carries its ``eval_<task>`` section."""

    import yaml

    from rag.config import load_config, sections

    with open(config, encoding="utf-8") as fh:
        cfg = _merged(yaml.safe_load(fh), overrides or {})
    parts = sections(load_config(cfg, check_files=False))
    out = {name: section_type(name).from_dict(d, f"{name}.json") for name, d in parts.items() if section_type(name)}
    for name in [n for n in out if n.startswith("train_")]:
        out[name] = out[name].model_copy(update={"evaluation": out[f"eval_{name[len('train_'):]}"]})
    return out


@pytest.fixture(autouse=True)
def registry_of_its_own():
    """Each test starts and ends with the registry's own tasks: a config or section a test reads
    declares its tasks in this process (rag.declared_tasks.declare_tasks), as a job's process would."""
    from rag.declared_tasks import declare_tasks

    declare_tasks(None)
    yield
    declare_tasks(None)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def snakemake_bin() -> str:
    exe = shutil.which("snakemake")
    if exe is None:
        pytest.fail("snakemake is not installed: run the README set-up command")
    return exe


def smk(workdir: Path, *args: str, configfile: Path | None = None, timeout: int = 1200) -> subprocess.CompletedProcess:
    cmd = [snakemake_bin(), "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), "--cores", "2", *args]
    if configfile is not None:  # last: --configfile takes every following word as a file
        cmd += ["--configfile", str(configfile)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def job_counts(out: str) -> dict[str, int]:
    """Parse snakemake's 'Job stats' table."""
    counts = {}
    block = out.split("Job stats:", 1)[1] if "Job stats:" in out else ""
    for line in block.splitlines()[3:]:
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not m:
            if counts:
                break
            continue
        counts[m.group(1)] = int(m.group(2))
    return counts


@pytest.fixture(scope="session")
def e2e(tmp_path_factory):
    """tests/data/e2e.yaml run to the end once for the session, in a folder of its own: (the folder,
    its config). A test that changes its files works on a copy (shutil.copytree keeps file times)."""
    work = tmp_path_factory.mktemp("e2e")
    cfg = work / "config.yaml"
    shutil.copy(ROOT / "tests" / "data" / "e2e.yaml", cfg)
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    res = smk(work, configfile=cfg)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-5000:])
    # the whole run's process tree (Snakemake and every job), measured around it (tests/test_dag.py)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    (work / "measured.json").write_text(json.dumps({"cpu_s": cpu, "wall_s": time.monotonic() - start}))
    return work, cfg


@pytest.fixture(scope="session")
def byo_beside_e2e(e2e, tmp_path_factory):
    """examples/byo (copied in) run to the end in a copy of the finished e2e folder: a second
    experiment in the same directory, once for the session. ``work``: the folder; ``e2e_mtimes`` and
    ``e2e_report``: results/e2e's files' mtimes and reports/e2e/report.html before the run; ``run``:
    the snakemake run (tests assert its exit code). tests/test_dag.py checks that the experiments keep
    apart, tests/test_byo.py what the example's run made."""
    work = tmp_path_factory.mktemp("byo_beside_e2e") / "work"
    shutil.copytree(e2e[0], work, symlinks=True)  # copy2 keeps file times: the e2e run, as it was
    shutil.copytree(ROOT / "examples", work / "examples")
    mtimes = {p: p.stat().st_mtime_ns for p in (work / "results" / "e2e").rglob("*") if p.is_file()}
    report = (work / "reports" / "e2e" / "report.html").read_text()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))  # the jobs' `rag` runs the code under test
        run = smk(work, configfile=work / "examples" / "byo" / "config.yaml")
    return SimpleNamespace(work=work, e2e_mtimes=mtimes, e2e_report=report, run=run)


def pytest_configure(config):
    config.addinivalue_line("markers", "runs_last: run after every other test (see pytest_collection_modifyitems)")


def pytest_collection_modifyitems(config, items):
    """Tests marked runs_last after all others, the others in their order. The SLURM cluster test
    installs slurm-wlm and stops its daemons at the end: from then on each snakemake start waits
    up to 10 s for the SLURM executor plugin's ``scontrol show config``, which no controller answers."""
    items.sort(key=lambda item: item.get_closest_marker("runs_last") is not None)


CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(),
                                    reason="/usr/bin/chromium not installed (apt-get install -y chromium)")


def chromium_render(html: Path, tmp: Path) -> tuple[str, bytes]:
    """Open ``html`` in headless Chromium: (the rendered DOM, a PNG screenshot); fails on any
    console message or uncaught error the page produces."""
    flags = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--enable-logging=stderr", "--v=0",
    ]
    url = Path(html).resolve().as_uri()
    dom = subprocess.run(flags + [f"--user-data-dir={tmp / 'chrome-dom'}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp / "report.png"
    res = subprocess.run(flags + [f"--user-data-dir={tmp / 'chrome-shot'}", f"--screenshot={shot}",
                                  "--window-size=1400,3000", "--hide-scrollbars", url],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    for err in (dom.stderr, res.stderr):
        console = [line for line in err.splitlines() if "CONSOLE" in line or "Uncaught" in line]
        assert not console, console
    return dom.stdout, shot.read_bytes()
