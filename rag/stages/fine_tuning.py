"""The fine-tuning stage: one task x variant from the pretrained generator (rule ``train``)."""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from pathlib import Path

from rag.errors import ConfigError, DataError
from rag.io import atomic_dir, read_jsonl, write_json
from rag.retrieval import RetrievalFiles
from rag.sections import TrainSection
from rag.stages.model_loading import build_system, check_k_in_passages, trained_question_encoder
from rag.tasks import TASKS, variant_retriever, variant_spec

log = logging.getLogger("rag")


def _targets_for_training(cfg: TrainSection, system, rows: list[dict]) -> tuple[list[str], list[str]]:
    """Training (input, target) pairs: a label's token, the first target, or for regex answers (as the
    paper) the most frequent match in the top retrieved passages (closed-book: ``meta.answer``)."""
    name = cfg.task_name
    spec = TASKS[name]
    if spec.classifies:
        from rag.models.tokenizer import label_token

        return [r["input"] for r in rows], [label_token(r["targets"][0]) for r in rows]
    if not spec.regex_targets:
        return [r["input"] for r in rows], [r["targets"][0] for r in rows]
    from rag.scoring.answer_match import bounded, compile_regex

    if system.passages is None:
        if any("answer" not in r.get("meta", {}) for r in rows):
            raise DataError(f"task {name}: regex answers without a recorded meta.answer cannot be trained closed-book")
        return [r["input"] for r in rows], [r["meta"]["answer"] for r in rows]
    inputs, targets, missing = [], [], 0
    depth = min(len(system.passages), 50)
    import torch

    with torch.no_grad():
        for i in range(0, len(rows), 64):
            chunk = rows[i : i + 64]
            ret = system.retrieve([r["input"] for r in chunk], depth)
            for row, ids in zip(chunk, ret.ids.tolist()):
                counts = collections.Counter()
                try:  # the same rule as the parsers and em_regex (passages are single lines)
                    pats = [compile_regex(p) for p in row["targets"]]
                except DataError as exc:
                    raise DataError(f"{name} training example {row.get('id')!r}: {exc}") from None
                for j in ids:
                    text = system.passages.texts[j]
                    for pat in pats:
                        counts.update(m.group(0) for m in bounded(pat, "finditer", text))
                if counts:
                    inputs.append(row["input"])
                    targets.append(counts.most_common(1)[0][0])
                else:
                    missing += 1
    log.info("%s: %d training questions have a regex match in their top-%d passages, %d have none (dropped, as the paper)",
             name, len(inputs), depth, missing)
    if not inputs:
        raise DataError(f"task {name}: no training question has a regex match in its retrieved passages")
    return inputs, targets


def fine_tune(cfg: TrainSection, device: str, variant: str, *, train_data: str | Path, generator: str | Path,
              checkpoint_dir: str | Path, out: str | Path, files: RetrievalFiles, init_from: str | Path | None = None,
              config_hash: str = "", eval_io: dict[str, tuple[str, str, str]] | None = None) -> None:
    """Fine-tune one task x variant from the ``generator`` folder or the model folder ``init_from``,
    resumable from ``checkpoint_dir``; write the model folder ``out`` and log the run to MLflow.
    ``eval_io`` (split -> data, predictions, metrics files): then evaluate in this process."""
    from rag.io import run_lock
    from rag.training import ddp_setup

    name = cfg.task_name
    vspec, t = variant_spec(variant), cfg.train
    retrieves = vspec.retriever is not None
    ks = [("train.k", t.k)] if retrieves else []  # every K this job retrieves with, checked before anything is built
    if eval_io:  # cfg.decoding() refuses a missing eval_<task> section before training, not after
        decode_k = cfg.decoding().decode.of(vspec.model).k
        ks += [(f"tasks.{name}.decode_{vspec.model}.k", decode_k)] if retrieves else []
    check_k_in_passages(files, ks)
    rank, world = ddp_setup()  # torchrun (train.ddp_processes > 1): one process per device
    with contextlib.ExitStack() as hold:
        if rank == 0:  # one writer of the checkpoint (and the model, the predictions, an MLflow run) at a time
            hold.enter_context(run_lock(checkpoint_dir, f"fine-tune {name}/{variant} seed {cfg.seed} of experiment {cfg.name}"))
        _fine_tune(cfg, device, variant, train_data=train_data, generator=generator, checkpoint_dir=checkpoint_dir,
                   out=out, files=files, init_from=init_from, config_hash=config_hash, eval_io=eval_io, rank=rank,
                   world=world)



def _end_to_end(cfg: TrainSection, variant: str, system) -> dict | None:
    """The options of the run's end-to-end retriever (family end2end), its objective and frozen generator set on
    ``system``; None for a run of another retriever."""
    retriever = variant_retriever(variant)
    if system.context_encoder is None or retriever is None:
        return None
    options = cfg.retrievers[retriever]["options"]
    system.objective, system.objective_temperature = options["objective"], options["objective_temperature"]
    if not options["share_encoders"]:
        system.context_encoder.train_top_layers = options["passage_encoder_layers"]
    if not options["train_generator"]:  # REPLUG: the generator only supervises the retriever
        system.generator.requires_grad_(False)
    return options


def _save_end_to_end(system, keeper, folder: Path, steps: int, train_cpu: float) -> dict:
    """The trained passage encoder and its index into the model folder (rag.retrieval.end2end.save_trained), swapped
    into the retriever for the evaluation that follows; the refreshes' records (the last one the final index's, its
    step the run's last) and the training process' CPU seconds (``train_cpu``, its refreshes included) into
    ``refresh.json``; their summary (rag.retrieval.end2end.refresh_summary), the run's metrics."""
    from rag.retrieval.end2end import REFRESH_FILE, refresh_summary, save_trained

    cpu, wall = time.process_time(), time.perf_counter()
    emb = save_trained(system.retriever, folder, keeper.options.batch_size)
    keeper.finish(steps, emb, time.process_time() - cpu, time.perf_counter() - wall)
    record = {"strategy": keeper.options.strategy, "objective": system.objective, "train_cpu_seconds": train_cpu,
              "records": keeper.records}
    write_json(folder / REFRESH_FILE, record)
    return refresh_summary(record)


def checkpoint_identity(cfg: TrainSection, variant: str, init, n_train: int, data: dict,
                        files: RetrievalFiles | None) -> dict:
    """What a fine-tune's checkpoint is resumed under (a checkpoint of another identity is not): its
    section, variant, starting model and number of examples, and the files it trains on as the manifest
    hashes them (``data``: :func:`rag.manifest.data_entries`), with the retrieval files that ``data``
    leaves out and a further retriever reads (``files``; None: the run retrieves nothing): a hybrid's
    BM25 beside the dense index, a reranker's cross-encoder and its scored pairs."""
    from rag.manifest import canonical_hash, file_entry

    # a further retriever's declarations (retriever_<name>) count as the train section does
    declared = {"retrievers": cfg.retrievers} if cfg.retrievers else {}
    hashed = {"passages": data["passages"], "index": data["index"], "init": data["init"], "train": data["splits"]["train"]}
    indexed = (data["index"] or {}).get("path")
    further = {role: file_entry(path) for role, path in (("bm25", files and files.bm25), ("reranker", files and files.reranker))
               if path and str(path) != indexed}
    return {"config_hash": canonical_hash({"config": cfg.to_dict(), "variant": variant, "init": str(init), "n_train": n_train,
                                           **declared}, 12),
            "inputs": canonical_hash({**hashed, **({"retrieval": further} if further else {})})[:16]}

def _fine_tune(cfg: TrainSection, device: str, variant: str, *, train_data, generator, checkpoint_dir, out,
               files: RetrievalFiles, init_from, config_hash: str, eval_io, rank: int, world: int) -> None:
    """:func:`fine_tune` once its checks passed and it holds the run's lock."""
    import torch

    from rag.manifest import build_manifest, data_entries
    from rag.models.tokenizer import ensure_label_tokens, save_tokenizer
    from rag.tracking import Run
    from rag.training import TrainRun, loss_curve, train

    name = cfg.task_name
    spec, vspec, t = TASKS[name], variant_spec(variant), cfg.train
    rows = read_jsonl(train_data, required=("id", "input", "targets"))
    init = init_from or generator
    q_dir = trained_question_encoder(init_from, cfg.task.init_from, variant)
    system = build_system(cfg, variant, init, device, files, q_dir)
    if system.question_encoder is not None:
        system.question_encoder.train_top_layers = t.question_encoder_layers
    if spec.classifies:
        ensure_label_tokens(system.tokenizer, system.generator, list(spec.labels))
    system.prepare_training()  # after the label tokens: a causal LM's adapters wrap the resized model
    e2e = _end_to_end(cfg, variant, system)
    passages_train = bool(e2e and e2e["train_passage_encoder"])
    encoders = e2e["encoder_processes"] if passages_train and e2e["index_refresh"] == "async" else 0
    trainers, channel = world - encoders, None
    if encoders:  # the job's last processes encode the corpus for the first, over a gloo group (CPU tensors)
        import torch.distributed as dist

        from rag.retrieval.encoders import shard_range
        from rag.retrieval.refresh import DistributedEncoding, serve

        if trainers != 1:
            raise ConfigError(f"index_refresh async: {world} processes for {encoders} encoder processes and one training "
                              "process (launch the job as the train rule does)")
        group = dist.new_group(backend="gloo")
        if rank >= trainers:
            share = shard_range(len(system.passages), rank - trainers, encoders)
            done = serve(system.retriever.context_encoder, system.passages, share, 0, e2e["context_encoder"]["batch_size"], group)
            log.info("%s/%s: encoder process %d encoded %d snapshot(s)", name, variant, rank, done)
            return
        channel = DistributedEncoding(list(range(trainers, world)), len(system.passages), system.retriever.index.d, group)
    inputs, targets = _targets_for_training(cfg, system, rows)
    run = None
    if rank == 0:
        # one run per seed; tag ``cell`` groups a (task, variant)'s seeds in the MLflow UI (group by tag)
        run = Run(cfg.tracking.uri, f"{cfg.name}/{name}", run_name=f"{variant} seed {cfg.seed}",
                  tags={"task": name, "variant": variant, "seed": cfg.seed, "cell": f"{name}/{variant}",
                        "rule": "train", "config_hash": config_hash, "ddp_processes": world},
                  supersedes=("cell", "seed", "rule"))
        run.params({"task": cfg.task.to_dict(), "train": t.to_dict(), "retriever": cfg.retriever.to_dict(),
                    "generator": cfg.generator.to_dict(), "variant": variant, "init_from": init, "n_train": len(inputs),
                    "seed": cfg.seed})
    ddp_module = None
    if trainers > 1:  # ddp_setup chose this process' GPU (LOCAL_RANK) before the model was built
        # frozen parts (lower question-encoder layers, pooler) get no gradient: let DDP skip them
        ddp_module = torch.nn.parallel.DistributedDataParallel(system, find_unused_parameters=True)
    # the checkpoint resumes under the same train_<task> section (not eval_<task>) and the same
    # files it trains on, as the manifest hashes them
    retrieves = vspec.retriever is not None
    splits = {"train": train_data, **({split: io[0] for split, io in eval_io.items()} if eval_io else {})}
    data = data_entries(passages=files.passages if retrieves else None,
                        index=(files.index or files.bm25) if retrieves else None, splits=splits, init=init)
    identity = checkpoint_identity(cfg, variant, init, len(inputs), data, files if retrieves else None)
    keeper = None
    if passages_train:
        from rag.retrieval.refresh import IndexKeeper, RefreshOptions

        probe = [r["input"] for r in read_jsonl(eval_io["dev"][0], required=("input",))] if eval_io and "dev" in eval_io else inputs
        keeper = IndexKeeper(system.retriever, RefreshOptions(e2e["index_refresh"], e2e["refresh_every"], e2e["rerank_depth"],
                                                              e2e["context_encoder"]["batch_size"]),
                             probe[: e2e["probe_questions"]], t.k, channel=channel)
    start, cpu = time.time(), time.process_time()
    try:
        how = TrainRun(Path(checkpoint_dir), cfg.seed, identity, rank=rank, world=trainers, ddp_module=ddp_module,
                       precision=cfg.precision)
        losses = train(system, inputs, targets, t, how,
                       train_question_encoder=vspec.train_question_encoder, train_passage_encoder=passages_train,
                       keeper=keeper)
    except BaseException:
        if run is not None:
            run.finish("FAILED")
        raise
    seconds, cpu = time.time() - start, time.process_time() - cpu
    if rank != 0:
        return
    # the whole curve, also the steps done before a resume (they come back with the checkpoint)
    run.curve("train_loss", loss_curve(losses, t.log_every))
    run.metrics({"train_seconds": seconds, "final_train_loss": sum(losses[-10:]) / max(1, len(losses[-10:]))})
    refresh = None
    with atomic_dir(out) as tmp:
        system.gen.save(tmp / "generator")
        # in the state the run tokenizes with, whatever the tokenizers did last (a resume at the last step: nothing)
        save_tokenizer(system.tokenizer, tmp / "generator", cfg.generator.max_source_len)
        if passages_train:  # its passage encoder and the index it makes of the corpus, what evaluation reads
            refresh = _save_end_to_end(system, keeper, tmp, t.steps, cpu)
        if system.question_encoder is not None and (vspec.train_question_encoder or passages_train):
            system.question_encoder.model.save_pretrained(tmp / "question_encoder")
            save_tokenizer(system.question_encoder.tokenizer, tmp / "question_encoder", system.question_encoder.max_length)
        elif q_dir:
            import shutil

            shutil.copytree(q_dir, tmp / "question_encoder")
        write_json(tmp / "meta.json", {"task": name, "variant": variant, "seed": cfg.seed, "mlflow_run_id": run.run_id,
                                        "mlflow_experiment_id": run.experiment_id, "steps": t.steps, "k": t.k,
                                        "train_seconds": seconds, "n_train": len(inputs), "init": init,
                                        "losses": losses})
        write_json(tmp / "manifest.json", build_manifest(
            run={"experiment": cfg.name, "task": name, "variant": variant, "mlflow_run_id": run.run_id,
                 "ddp_processes": world},
            config={f"train_{name}": cfg.to_dict(), **({f"eval_{name}": cfg.evaluation.to_dict()} if cfg.evaluation else {}),
                    **({f"retriever_{variant_retriever(variant)}": {"retrievers": cfg.retrievers}} if cfg.retrievers else {})},
            seed=cfg.seed, device=device, threads=torch.get_num_threads(), precision=cfg.precision, data=data))
    run.artifact(Path(out) / "manifest.json")
    if refresh is not None:
        run.metrics(refresh)
    log.info("%s/%s: %d steps in %.1fs, final loss %.3f", name, variant, t.steps, seconds, losses[-1] if losses else float("nan"))
    if eval_io:  # evaluate in this process (config key evaluate_in_train_job): no second start-up
        # the saved generator, and the retriever as trained (its question encoder is the one just saved)
        retriever = system.retriever
        del system
        from rag.stages.evaluation import evaluate_model

        evaluate_model(cfg, variant, eval_io, out, device, retriever=retriever)
