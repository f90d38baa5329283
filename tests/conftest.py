import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def section_type(name: str):
    """The typed class (rag.sections) of the section ``name`` (corpus, data_nq, train_nq, ...);
    None for the report's, which no stage reads."""
    from rag import sections as S

    kinds = {"corpus": S.CorpusSection, "encode": S.EncodeSection, "index": S.IndexSection,
             "generator": S.GeneratorSection, "experiments": S.ExperimentsSection, "data": S.DataSection,
             "train": S.TrainSection, "eval": S.EvalSection, "report": None}
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
    import dataclasses

    import yaml

    from rag.config import load_config, sections

    with open(config, encoding="utf-8") as fh:
        cfg = _merged(yaml.safe_load(fh), overrides or {})
    parts = sections(load_config(cfg, check_files=False))
    out = {name: section_type(name).from_dict(d, f"{name}.json") for name, d in parts.items() if section_type(name)}
    for name in [n for n in out if n.startswith("train_")]:
        out[name] = dataclasses.replace(out[name], evaluation=out[f"eval_{name[len('train_'):]}"])
    return out


@pytest.fixture(autouse=True)
def registry_of_its_own():
    """Each test starts and ends with the registry's own tasks: a config or section a test reads
    declares its tasks in this process (rag.tasks.declare_tasks), as a job's process would."""
    from rag.tasks import declare_tasks

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
