"""A model folder as transformers reads one: ``config.json``, the weights and the tokenizer files.

:func:`folder_problem` says in words what keeps a local folder from loading, before transformers
meets it (a damaged folder would end in its traceback; one without tokenizer files would even load
a tokenizer of the architecture's defaults); :func:`loading` checks a local folder so and turns the
errors of transformers reading a model into one line naming it. Light: no torch, no transformers.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

from rag.errors import DataError

WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER = ("tokenizer.json", "tokenizer_config.json")
FAMILY_KEY = "rag_family"  # the family a saved generator's config.json names


def is_local(name: str | Path) -> bool:
    """Whether ``name`` names a local folder rather than a Hugging Face model: it exists here, or it is
    a path (starts with ``/``, ``.`` or ``~``, or is no repository id ``name`` / ``namespace/name``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    text = str(name)
    if Path(text).exists() or text.startswith(("/", ".", "~")):
        return True
    try:
        validate_repo_id(text)
    except HFValidationError:
        return True
    return False


def folder_problem(path: str | Path) -> str | None:
    """What keeps transformers from loading the local folder ``path`` as a model and its tokenizer
    (no such folder, no config.json or one of no model, no weights, a truncated safetensors file, no
    tokenizer files), else None."""
    folder = Path(path)
    if not folder.exists():
        return "no such folder" + (" (a ~ is not expanded: write the whole path)" if str(path).startswith("~") else "")
    if not folder.is_dir():
        return "not a folder"
    if not (folder / "config.json").is_file():
        return "not a model folder (no config.json)" if any(folder.iterdir()) else "an empty folder, not a model folder"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"config.json is not valid JSON ({exc})"
    if not isinstance(config, dict) or "model_type" not in config:
        return f"config.json is no model's configuration (a {type(config).__name__} without model_type)"
    if not any((folder / name).is_file() for name in WEIGHTS):
        return f"no weights ({' or '.join(WEIGHTS[:2])})"
    from safetensors import SafetensorError, safe_open

    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), "numpy"):
                pass
        except (SafetensorError, OSError) as exc:
            return f"{file.name} is damaged ({exc}: truncated?)"
    if not any((folder / name).is_file() for name in TOKENIZER):
        return f"no tokenizer ({' or '.join(TOKENIZER)})"
    return None


def model_family(path: str | Path) -> str:
    """The generator family of the model folder ``path`` (rag/tasks.py GENERATOR_FAMILIES): the one its
    ``config.json`` names (:data:`FAMILY_KEY`), else seq2seq for an encoder-decoder, causal_lm for the rest."""
    from rag.tasks import GENERATOR_FAMILIES

    config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    by_shape = (f.name for f in GENERATOR_FAMILIES.values() if f.encoder_decoder == bool(config.get("is_encoder_decoder")))
    return config.get(FAMILY_KEY) or next(by_shape)


@contextlib.contextmanager
def loading(name: str | Path, what: str) -> Iterator[None]:
    """Load the model ``name`` (a local folder or a Hugging Face name), the ``what`` of a command
    ("generator", "encoder"), in the block: a local folder that is not a whole model folder
    (:func:`folder_problem`), and an error of transformers reading it, are one DataError naming it (a
    full disk or no memory left stay theirs: rag.errors.failure_line)."""
    from safetensors import SafetensorError

    from rag.errors import failure_line

    if is_local(name) and (problem := folder_problem(name)) is not None:
        raise DataError(f"{what} {name}: {problem}")
    try:
        yield
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        if failure_line(exc, "load") is not None:
            raise
        said = " ".join(str(exc).split())[:300]
        raise DataError(f"{what} {name}: cannot be loaded ({type(exc).__name__}: {said})") from None


def package_model_folder(name: str) -> Path:
    """The ``model/`` folder that the top-level package of ``package:<module>`` ships (holding
    ``model/config.json``), found without importing anything; anything else is a ConfigError."""
    import importlib.util
    import re

    from rag.errors import ConfigError

    mod = name.split(":", 1)[1]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", mod):
        raise ConfigError(f"retriever encoder {name!r}: package:<name> names a top-level Python package (letters, digits, _)")
    spec = importlib.util.find_spec(mod)
    if spec is None:
        raise ConfigError(f"retriever encoder {name!r}: Python package {mod!r} is not installed")
    folders = list(spec.submodule_search_locations or [])
    model = next((Path(f) / "model" for f in folders if (Path(f) / "model" / "config.json").is_file()), None)
    if model is None:
        raise ConfigError(f"retriever encoder {name!r}: {mod!r} ships no encoder (no model/config.json in its package "
                          f"folder); name a package that does, a Hugging Face model or a local folder")
    return model
