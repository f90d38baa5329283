"""Retrieval behind one interface: ``Retriever.retrieve(questions, k) -> Retrieved``
(:mod:`rag.retrieval.base`, which needs torch; this module does not), each registered retriever
(``rag/tasks.py`` RETRIEVERS) built from the retrieval files it reads (:class:`RetrievalFiles`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag.retrieval.base import Retriever
    from rag.config_keys import QuestionEncoder

# role -> (command-line flag, takes several paths): the retrieval files a retriever may read
FILE_ROLES: dict[str, tuple[str, bool]] = {
    "passages": ("--passages", False),  # passages.tsv
    "embeddings": ("--embeddings", True),  # the passage embedding shards, in order
    "index": ("--index", False),  # the FAISS index over them
    "bm25": ("--bm25", False),  # the BM25 index folder
    "reranker": ("--reranker", False),  # a rerank retriever's cross-encoder for the task (rule train_reranker)
}


@dataclass
class RetrievalFiles:
    """The files a retriever reads (a role of FILE_ROLES each; None where the retriever reads none)."""

    passages: str | None = None
    embeddings: list[str] = field(default_factory=list)
    index: str | None = None
    bm25: str | None = None
    reranker: str | None = None

    @classmethod
    def from_args(cls, args) -> "RetrievalFiles":
        return cls(**{role: getattr(args, role, None) or ([] if many else None)
                      for role, (_, many) in FILE_ROLES.items()})


def add_file_args(parser) -> None:
    """The retrieval-file flags of FILE_ROLES on a subcommand."""
    for role, (flag, many) in FILE_ROLES.items():
        parser.add_argument(flag, dest=role, nargs="+" if many else None, help=f"retrieval file: {role}")


def retriever_files(name: str, declared: dict) -> tuple[str, ...]:
    """The retrieval file roles retriever ``name`` reads, in FILE_ROLES order: its family's, and those of the
    retrievers it names (``declared``: config key retrievers, name -> {family, options})."""
    from rag.tasks import declared_spec, retriever_refs

    roles = set(declared_spec(name, declared)[0].files).union(*(retriever_files(r, declared) for r in retriever_refs(name, declared)))
    return tuple(role for role in FILE_ROLES if role in roles)


def retrievers_reading(role: str, name: str, declared: dict) -> list[str]:
    """The declared retrievers retriever ``name`` is built from (itself included) whose family reads file role
    ``role`` itself (a rerank retriever's ``reranker``), in the order of the parts."""
    from rag.tasks import declared_spec, retriever_refs

    own = [name] if name in declared and role in declared_spec(name, declared)[0].files else []
    return own + [r for ref in retriever_refs(name, declared) for r in retrievers_reading(role, ref, declared)]


def build_retriever(name: str | None, files: RetrievalFiles, options: QuestionEncoder | None, device: str,
                    question_encoder_dir: str | None = None, declared: dict | None = None) -> Retriever | None:
    """The retriever ``name`` over ``files``: a registered one (rag/tasks.py RETRIEVERS) or one of
    ``declared`` (config key retrievers: name -> {family, options}), with the retrievers it names; None for
    None. ``options``: the question encoder's (a dense retriever's) configuration."""
    from rag.errors import ConfigError
    from rag.tasks import declared_spec, load_object

    if name is None:
        return None
    declared = declared or {}
    spec, options_of = declared_spec(name, declared)
    missing = [FILE_ROLES[role][0] for role in retriever_files(name, declared) if not getattr(files, role)]
    if missing:
        raise ConfigError(f"retriever {name} needs {', '.join(missing)}")
    factory = load_object(spec.factory, "retriever")
    if options_of is None:
        return factory(files, options, device, question_encoder_dir)
    return factory(files, options, device, question_encoder_dir, declaration=options_of,
                   build=lambda part: build_retriever(part, files, options, device, question_encoder_dir, declared))
