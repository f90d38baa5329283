"""The runs a resolved config has (task x variant x seed, the further generators' and retrievers'), and what the
workflow, the report and ``rag plan`` read of them."""

from __future__ import annotations

from rag.sections import task_decode
from rag.tasks import ROLES, family_spec


def generator_groups(cfg: dict) -> list[tuple[str, dict]]:
    """(config key, group) of each generator of the resolved config: ``generator`` and each further one's."""
    return [("generator", cfg["generator"])] + [(f"generators.{name}.generator", spec["generator"])
                                                for name, spec in cfg["generators"].items()]


def generator_runs(cfg: dict) -> list[tuple[str, str]]:
    """(task, ``<variant>@<generator>``) of every run of the further generators (config key
    ``generators``): its variants, else each task's."""
    from rag.tasks import GENERATOR_SEP

    return [(task, f"{v}{GENERATOR_SEP}{name}") for name, spec in cfg["generators"].items() for task in spec["tasks"]
            for v in (spec.get("variants") or task_variants(cfg, task))]


def retriever_runs(cfg: dict, target: str | None = None) -> list[tuple[str, str]]:
    """(task, ``<variant>+<retriever>``) of every run of the further retrievers (config key ``retrievers``), or of
    those the ``target`` runs (their key ``target``): its variants, else those of each task's variants that use
    the dense retriever and that it can serve."""
    from rag.tasks import RETRIEVER_SEP, VARIANTS, retriever_trains

    out = []
    for name, spec in cfg["retrievers"].items():
        if target is not None and spec["target"] != target:
            continue
        trains = retriever_trains(name, cfg["retrievers"])
        for task in spec["tasks"]:
            variants = spec.get("variants") or [v for v in task_variants(cfg, task) if VARIANTS[v].retriever == "dense"
                                                and (trains or not VARIANTS[v].train_question_encoder)]
            out += [(task, f"{v}{RETRIEVER_SEP}{name}") for v in variants]
    return out


def retriever_declarations(cfg: dict, name: str) -> dict:
    """The ``retriever_<name>`` section: the declarations (family, options) of declared retriever ``name``
    and of every declared one it names, which its runs' jobs build it from."""
    from rag.tasks import retriever_refs

    declared, out, todo = cfg["retrievers"], {}, [name]
    while todo:
        n = todo.pop()
        if n in declared and n not in out:
            out[n] = {"family": declared[n]["family"], "options": declared[n]["options"]}
            todo += retriever_refs(n, declared)
    return {"retrievers": out}


def reranker_declarations(cfg: dict, name: str) -> dict:
    """The ``reranker_<name>`` section of declared retriever ``name`` whose family reads a model a rule makes
    (role ``reranker``: rule train_reranker): its ``retriever_<name>`` section without the options its family
    reads only where it retrieves (``RetrieverSpec.retrieval_only``)."""
    from rag.tasks import declared_spec

    out = retriever_declarations(cfg, name)
    spec = declared_spec(name, cfg["retrievers"])[0]
    own = out["retrievers"][name]
    out["retrievers"][name] = {**own, "options": {k: v for k, v in own["options"].items() if k not in spec.retrieval_only}}
    return out


def generator_summary(g: dict) -> str:
    """A generator group in a few words (the report's scale summary)."""
    if g["init"] == "pretrained":
        return g.get("name_or_path")
    return family_spec(g["family"]).scratch_summary.format(**g, s="s" * (g["layers"] != 1))


def retrieval_ks(cfg: dict) -> list[tuple[str, int]]:
    """(dotted config key, K) of every number of passages the configured runs retrieve: train.k
    when a variant retrieves, each task's test-time K of the retrieving models it runs
    (``decode_token`` for RAG-Token variants, ``decode_sequence`` for RAG-Sequence ones), and
    Figure 3's sweep when it runs (its task runs rag_sequence or rag_token)."""
    from rag.tasks import variant_spec

    retrieving = {t: [v for v in task_variants(cfg, t) if variant_spec(v).retriever is not None] for t in sorted(cfg["tasks"])}
    out = [("train.k", cfg["train"]["k"])] if any(retrieving.values()) else []
    for task, variants in retrieving.items():
        for model in sorted({variant_spec(v).model for v in variants}):
            out.append((f"tasks.{task}.decode_{model}.k", task_decode(cfg, task, model)["k"]))
    exp = cfg["experiments"]
    if any(v in ("rag_sequence", "rag_token") for v in retrieving.get(exp["topk_task"], ())):
        out += [(f"experiments.topk_sweep[{i}]", k) for i, k in enumerate(exp["topk_sweep"])]
    return out


def hotswap_runs(cfg: dict) -> bool:
    """Whether the index hot-swap runs: experiments.hotswap, a miniworld corpus (two snapshots) and the task
    whose questions it asks (rag/tasks.py ROLES) configured."""
    return bool(cfg["experiments"]["hotswap"] and cfg["corpus"]["source"] == "miniworld" and ROLES.hotswap in cfg["tasks"])


def task_variants(cfg: dict, task: str) -> list[str]:
    """The variants run on ``task``: ``tasks.<task>.variants``, else the top-level ``variants``
    (in the top-level list's order)."""
    chosen = cfg["tasks"][task].get("variants")
    return [v for v in cfg["variants"] if chosen is None or v in chosen]


def run_seeds(cfg: dict, task: str, variant: str) -> list[int]:
    """The fine-tune seeds of ``task`` x ``variant``: ``tasks.<task>.variant_seeds`` of the variant, else
    ``tasks.<task>.seeds``, else the top-level ``seeds``; of these two the first alone for a variant of
    ``one_seed_variants``; those of its declared retriever's ``seeds`` (a run ``<variant>+<name>``) over all."""
    from rag.tasks import split_variant, variant_retriever

    declared = (cfg.get("retrievers") or {}).get(variant_retriever(variant) or "", {})
    if declared.get("seeds"):  # retrievers.<name>.seeds
        return list(declared["seeds"])
    base, spec = split_variant(variant)[0], cfg["tasks"][task]
    if base in spec.get("variant_seeds", {}):
        return list(spec["variant_seeds"][base])
    chosen = spec.get("seeds") or cfg["seeds"]
    return list(chosen[:1] if base in cfg["one_seed_variants"] else chosen)


def experiment_runs(cfg: dict) -> list[dict]:
    """``{task, variant, seeds}`` of every run of the config's generator (not the further generators'),
    task by task: the runs the report and ``snakemake check`` read. The report section records them,
    so ``rag check --experiment`` and ``rag bands`` read the same runs of a finished experiment folder."""
    return [{"task": task, "variant": v, "seeds": run_seeds(cfg, task, v)} for task in sorted(cfg["tasks"])
            for v in task_variants(cfg, task)]


def _steps_by_task(cfg: dict) -> int | str:
    """Fine-tuning steps: one number when every task trains train.steps, else each count with its
    tasks (tasks.<task>.steps), the most steps first: "80 (nq, triviaqa); 30 (curatedtrec, ...)"."""
    by: dict[int, list[str]] = {}
    for name in sorted(cfg["tasks"]):
        by.setdefault(cfg["tasks"][name].get("steps", cfg["train"]["steps"]), []).append(name)
    if len(by) == 1:
        return next(iter(by))
    return "; ".join(f"{n} ({', '.join(names)})" for n, names in sorted(by.items(), reverse=True))


def scale_summary(cfg: dict) -> dict:
    return {
        "corpus": cfg["corpus"]["name"],
        "corpus_source": cfg["corpus"]["source"],
        "generator": generator_summary(cfg["generator"]),
        "question_encoder": cfg["retriever"]["question_encoder"],
        "index": cfg["retriever"]["index"],
        "train_k": cfg["train"]["k"],
        "train_steps": _steps_by_task(cfg),
        "batch_size": cfg["train"]["batch_size"],
        "seeds": _seeds_by_run(cfg),
    }


def _seeds_by_run(cfg: dict) -> str:
    """The fine-tune seeds, grouped: "1, 2, 3 (nq: rag_sequence, rag_token); 1 (the other runs)"."""
    by: dict[tuple[int, ...], list[str]] = {}
    for name in sorted(cfg["tasks"]):
        for v in task_variants(cfg, name):
            by.setdefault(tuple(run_seeds(cfg, name, v)), []).append(f"{name}/{v}")
    if len(by) == 1:
        return ", ".join(map(str, next(iter(by))))
    most = max(by, key=lambda k: len(by[k]))
    parts = [f"{', '.join(map(str, seeds))} ({', '.join(runs)})" for seeds, runs in sorted(by.items(), key=lambda x: -len(x[0]))
             if seeds != most]
    return "; ".join(parts + [f"{', '.join(map(str, most))} (the other runs)"])


def train_processes(cfg: dict, variant: str) -> int:
    """The processes of a train job of ``variant`` (torchrun's --nproc-per-node): train.ddp_processes, and for a run
    of an end-to-end retriever refreshed asynchronously, its training process and its encoder_processes."""
    from rag.tasks import variant_retriever

    options = cfg["retrievers"].get(variant_retriever(variant) or "", {}).get("options") or {}
    if options.get("index_refresh") == "async":
        return 1 + options["encoder_processes"]
    return cfg["train"]["ddp_processes"]
