"""Train, evaluate and experiment subcommands (Snakemake rules ``train``, ``evaluate``,
``topk_sweep`` and ``hotswap``)."""

from __future__ import annotations

import collections
import logging
import time
from pathlib import Path

from rag import runtime
from rag.config import read_sections
from rag.errors import ConfigError, DataError
from rag.io import atomic_dir, read_json, read_jsonl, write_json, write_jsonl
from rag.retrieval import RetrievalFiles, add_file_args
from rag.evaluate import answer_hits, metric_options, predict, score_predictions
from rag.tasks import TASKS, VARIANTS, variant_spec

log = logging.getLogger("rag")


def trained_question_encoder(model_dir: str | Path | None) -> str | None:
    """The fine-tuned question encoder a model folder holds (``question_encoder/``), else None."""
    q_dir = Path(model_dir) / "question_encoder" if model_dir else None
    return str(q_dir) if q_dir is not None and q_dir.is_dir() else None


def build_system(cfg: dict, variant: str, model_dir: str, device: str, files: RetrievalFiles | None = None,
                 question_encoder_dir: str | None = None, retriever=None):
    """The variant's RAG system: the generator of ``model_dir`` and ``retriever``, or (None) the
    variant's registered retriever over ``files`` (its question encoder from ``question_encoder_dir``
    or the configured one)."""
    from rag.models.generator import load_generator
    from rag.models.rag import RagSystem
    from rag.retrieval import build_retriever

    spec = variant_spec(variant)
    gen_dir = Path(model_dir) / "generator" if (Path(model_dir) / "generator").is_dir() else Path(model_dir)
    generator, tok = load_generator(gen_dir, device)
    if retriever is None:
        retriever = build_retriever(spec.retriever, files or RetrievalFiles(), cfg, device, question_encoder_dir)
    g = cfg["generator"]
    return RagSystem(generator, tok, spec.model, retriever, g["max_source_len"], g["max_target_len"],
                     chunk_overhead=g["chunk_overhead"], precision=cfg["precision"])


def load_trained(cfg: dict, variant: str, model_dir: str, device: str, files: RetrievalFiles | None = None,
                 retriever=None):
    """A trained model folder (generator/, question_encoder/ when fine-tuned) ready for inference,
    with ``retriever`` or the variant's retriever over ``files``."""
    system = build_system(cfg, variant, model_dir, device, files, trained_question_encoder(model_dir), retriever)
    system.eval()
    return system


def _targets_for_training(cfg: dict, system, rows: list[dict], k: int) -> tuple[list[str], list[str]]:
    """Training (input, target) pairs. CuratedTrec has regex answers: as the paper, the target
    is the most frequent match of the regex in the top retrieved documents."""
    name = cfg["task_name"]
    spec = TASKS[name]
    if spec.kind == "classification":
        from rag.models.generator import label_token

        return [r["input"] for r in rows], [label_token(r["targets"][0]) for r in rows]
    if spec.kind != "regex":
        return [r["input"] for r in rows], [r["targets"][0] for r in rows]
    from rag.metrics import compile_regex

    if system.passages is None:
        raise ConfigError(f"task {name}: regex answers need a retriever to find training targets; the bart variant "
                          "uses the answer recorded in meta.answer when the data has one")
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
                        counts.update(m.group(0) for m in pat.finditer(text))
                if counts:
                    inputs.append(row["input"])
                    targets.append(counts.most_common(1)[0][0])
                else:
                    missing += 1
    log.info("curatedtrec: %d training questions have a regex match in their top-%d passages, %d have none (dropped, as the paper)",
             len(inputs), depth, missing)
    if not inputs:
        raise DataError(f"task {name}: no training question has a regex match in its retrieved passages")
    return inputs, targets


def _bart_regex_targets(rows):
    out = [(r["input"], r["meta"]["answer"]) for r in rows if "answer" in r.get("meta", {})]
    if len(out) < len(rows):
        raise DataError("curatedtrec bart: regex answers without a recorded meta.answer cannot be trained closed-book")
    return [a for a, _ in out], [b for _, b in out]


def cmd_train(args) -> None:
    import torch

    from rag.models.generator import ensure_label_tokens
    from rag.tracking import Run
    from rag.train import ddp_setup, train

    cfg = read_sections(args.config)
    device = runtime.setup(cfg)
    rank, world = ddp_setup()  # torchrun (train.ddp_processes > 1): one process per device
    name, variant = cfg["task_name"], args.variant
    spec, vspec, t = TASKS[name], variant_spec(variant), cfg["train"]
    eval_io = _eval_io(args, required=False)  # evaluate_in_train_job: dev/test decoded by this job too
    rows = read_jsonl(args.train_data, required=("id", "input", "targets"))
    init = args.init_from or args.generator
    q_dir = trained_question_encoder(args.init_from)
    system = build_system(cfg, variant, init, device, RetrievalFiles.from_args(args), q_dir)
    if system.question_encoder is not None:
        system.question_encoder.train_top_layers = t.get("question_encoder_layers")
    if spec.kind == "classification":
        ensure_label_tokens(system.tokenizer, system.generator, list(spec.labels))
    if spec.kind == "regex" and vspec.retriever is None:
        inputs, targets = _bart_regex_targets(rows)
    else:
        inputs, targets = _targets_for_training(cfg, system, rows, t["k"])
    run = None
    if rank == 0:
        run = Run(cfg["tracking"]["uri"], f"{cfg['name']}/{name}", run_name=variant,
                  tags={"task": name, "variant": variant, "rule": "train", "config_hash": args.config_hash or "",
                        "ddp_processes": world})
        run.params({"task": cfg["task"], "train": t, "retriever": cfg["retriever"], "generator": cfg["generator"],
                    "variant": variant, "init_from": init, "n_train": len(inputs), "seed": cfg["seed"]})
    ddp_module = None
    if world > 1:  # ddp_setup chose this process' GPU (LOCAL_RANK) before the model was built
        # frozen parts (lower question-encoder layers, pooler) get no gradient: let DDP skip them
        ddp_module = torch.nn.parallel.DistributedDataParallel(system, find_unused_parameters=True)
    from rag.config import config_hash

    # the training configuration only: after an edit of test-time keys (decode, metrics: the eval_<task>
    # section a fused train job also reads) the finished checkpoint resumes at its last step
    train_cfg = {k: v for k, v in cfg.items() if k not in ("decode", "metrics")}
    identity = {"config_hash": config_hash({"config": train_cfg, "variant": variant, "init": str(init),
                                            "n_train": len(inputs)})}
    start = time.time()
    try:
        losses = train(system, inputs, targets, steps=t["steps"], batch_size=t["batch_size"], k=t["k"], lr=t["lr"],
                       qenc_lr=t["question_encoder_lr"], train_question_encoder=vspec.train_question_encoder,
                       warmup=t["warmup_steps"], epsilon=t["label_smoothing"], seed=cfg["seed"], ckpt_dir=Path(args.checkpoint_dir),
                       checkpoint_every=t["checkpoint_every"], log_every=t["log_every"],
                       rank=rank, world=world, ddp_module=ddp_module, precision=cfg["precision"],
                       identity=identity)
    except BaseException:
        if run is not None:
            run.finish("FAILED")
        raise
    seconds = time.time() - start
    if rank != 0:
        return
    # the whole curve, also the steps done before a resume (they come back with the checkpoint)
    every = t["log_every"]
    run.curve("train_loss", [(i + 1, sum(losses[i + 1 - every : i + 1]) / every)
                             for i in range(every - 1, len(losses), every)])
    run.metrics({"train_seconds": seconds, "final_train_loss": sum(losses[-10:]) / max(1, len(losses[-10:]))})
    with atomic_dir(args.out) as tmp:
        system.generator.save_pretrained(tmp / "generator")
        system.tokenizer.save_pretrained(tmp / "generator")
        if system.question_encoder is not None and vspec.train_question_encoder:
            system.question_encoder.model.save_pretrained(tmp / "question_encoder")
            system.question_encoder.tokenizer.save_pretrained(tmp / "question_encoder")
        elif q_dir:
            import shutil

            shutil.copytree(q_dir, tmp / "question_encoder")
        write_json(tmp / "meta.json", {"task": name, "variant": variant, "mlflow_run_id": run.run_id,
                                        "mlflow_experiment_id": run.experiment_id, "steps": t["steps"], "k": t["k"],
                                        "train_seconds": seconds, "n_train": len(inputs), "init": init,
                                        "losses": losses})
    log.info("%s/%s: %d steps in %.1fs, final loss %.3f", name, variant, t["steps"], seconds, losses[-1] if losses else float("nan"))
    if eval_io:  # evaluate in this process (config key evaluate_in_train_job): no second start-up
        # the saved generator, and the retriever as trained (its question encoder is the one just saved)
        retriever = system.retriever
        del system
        evaluate_model(cfg, variant, eval_io, args.out, device, retriever=retriever)


# ------------------------------------------------------------------------------ evaluation
EVAL_FLAGS = ("dev", "test", "dev_predictions", "dev_metrics", "test_predictions", "test_metrics")


def _eval_io(args, required: bool) -> dict[str, tuple[str, str, str]] | None:
    """split -> (data file, predictions file, metrics file) from the --dev/--test/--*-predictions/
    --*-metrics flags: all six, or (``required=False``) none."""
    given = {f: getattr(args, f) for f in EVAL_FLAGS}
    if not any(given.values()) and not required:
        return None
    missing = [f"--{f.replace('_', '-')}" for f, v in given.items() if not v]
    if missing:
        raise ConfigError(f"evaluation needs {', '.join(missing)} (the files to read and write for dev and test)")
    return {split: (given[split], given[f"{split}_predictions"], given[f"{split}_metrics"]) for split in ("dev", "test")}


def cmd_evaluate(args) -> None:
    cfg = read_sections(args.config)
    device = runtime.setup(cfg)
    evaluate_model(cfg, args.variant, _eval_io(args, required=True), args.model_dir, device,
                   files=RetrievalFiles.from_args(args))


def evaluate_model(cfg: dict, variant: str, io: dict[str, tuple[str, str, str]], model_dir: str, device: str,
                   files: RetrievalFiles | None = None, retriever=None) -> None:
    """Decode dev and test with the saved model folder, score, write predictions + metrics, log to its run.

    ``io``: split -> (data jsonl to read, predictions jsonl and metrics.json to write); the
    retriever is ``retriever`` or the variant's over ``files``."""
    from rag.tracking import Run

    name = cfg["task_name"]
    meta = read_json(Path(model_dir) / "meta.json")
    system = load_trained(cfg, variant, model_dir, device, files, retriever)
    if meta.get("mlflow_run_id"):
        run = Run(cfg["tracking"]["uri"], "", run_id=meta["mlflow_run_id"], tags={"evaluated": "yes"})
    else:  # a model imported without a run (rag import-hf-rag): evaluation opens one
        run = Run(cfg["tracking"]["uri"], f"{cfg['name']}/{name}", run_name=variant,
                  tags={"task": name, "variant": variant, "rule": "evaluate", "imported": "yes"})
    dec = cfg["decode"][variant_spec(variant).model]
    for split, (data_path, pred_path, metrics_path) in io.items():
        rows = read_jsonl(data_path, required=("id", "input", "targets"))
        t = time.time()
        preds = predict(cfg, system, variant, rows)
        seconds = time.time() - t
        scores, rec = score_predictions(cfg, preds, system.passages)
        write_jsonl(pred_path, preds)
        result = {"task": name, "variant": variant, "split": split, "n": len(preds), "metrics": scores, "retrieval": rec,
                  "metric_options": metric_options(cfg),
                  "decode": dec, "decode_seconds": seconds, "mlflow_run_id": run.run_id,
                  "mlflow_experiment_id": run.experiment_id}
        write_json(metrics_path, result)
        run.metrics({f"{split}_{k}": v for k, v in {**scores, **rec}.items()})
        run.artifact(Path(metrics_path), f"eval/{split}")
        run.artifact(Path(pred_path), f"eval/{split}")
        log.info("%s/%s %s: %s %s", name, variant, split, scores, rec)
    run.finish()


def cmd_topk_sweep(args) -> None:
    from rag import metrics as M
    from rag.tracking import Run

    cfg = read_sections(args.config)
    exp = read_sections(args.experiments_config)["experiments"]
    device = runtime.setup(cfg)
    variant = args.variant
    meta = read_json(Path(args.model_dir) / "meta.json")
    system = load_trained(cfg, variant, args.model_dir, device, RetrievalFiles.from_args(args))
    passages = system.passages
    rows = read_jsonl(args.test, required=("id", "input", "targets"))
    primary = TASKS[cfg["task_name"]].primary
    ks = sorted(k for k in exp["topk_sweep"] if k <= len(passages))
    res = {"task": cfg["task_name"], "variant": variant, "k": ks, "em": [], "answer_recall": [], "metric": primary}
    run = Run(cfg["tracking"]["uri"], "", run_id=meta["mlflow_run_id"])
    res["per_example"] = {}
    regex = TASKS[cfg["task_name"]].kind == "regex"
    opts = metric_options(cfg)
    for k in ks:
        preds = predict(cfg, system, variant, rows, k=k)
        scores, rec = score_predictions(cfg, preds, passages)
        # per question, in id order: the claims checklist bootstraps over them
        preds = sorted(preds, key=lambda x: x["id"])
        res["per_example"][str(k)] = {
            "id": [x["id"] for x in preds],
            "correct": [M.compute(primary, [x["prediction"]], [x["targets"]], tokenizer=opts.get("tokenizer", "python"),
                                  qbleu_weights=opts.get("qbleu1")) for x in preds],
            "hit": answer_hits(preds, passages, regex),
        }
        res["em"].append(scores[primary])
        res["answer_recall"].append(rec.get(f"answer_recall@{k}", float("nan")))
        run.metrics({"topk_" + primary: scores[primary], "topk_answer_recall": res["answer_recall"][-1]}, step=k)
    write_json(args.out, res)


def cmd_hotswap(args) -> None:
    from rag import metrics as M

    cfg = read_sections(args.config)
    device = runtime.setup(cfg)
    variant = args.variant
    rows = read_jsonl(args.questions, required=("id", "input", "targets"))
    cells = {}
    detail = []
    for snap, passages, embs, index in (("a", args.passages_a, args.embeddings_a, args.index_a),
                                        ("b", args.passages_b, args.embeddings_b, args.index_b)):
        files = RetrievalFiles(passages=passages, embeddings=embs, index=index)
        system = load_trained(cfg, variant, args.model_dir, device, files)
        preds = predict(cfg, system, variant, [{**r, "targets": r["targets"]["a"]} for r in rows])
        for qs in ("a", "b"):
            cells[f"{qs}|{snap}"] = sum(M.exact_match(p["prediction"], r["targets"][qs]) for p, r in zip(preds, rows))
        detail += [{"id": r["id"], "index": snap, "prediction": p["prediction"], "answer_a": r["targets"]["a"][0],
                    "answer_b": r["targets"]["b"][0], "changed": bool(r["meta"]["changed"]),
                    "correct_a": M.exact_match(p["prediction"], r["targets"]["a"]),
                    "correct_b": M.exact_match(p["prediction"], r["targets"]["b"])} for p, r in zip(preds, rows)]
    write_json(args.out, {"variant": variant, "n": len(rows), "cells": cells,
                          "changed": sum(r["meta"]["changed"] for r in rows), "detail": detail})


def oracle_eval(cfg: dict, variant: str, model_dir: str, passages_path: str, rows: list[dict], device: str) -> dict:
    """The trained model's answers with the gold passage as its only document (K = 1): reader
    quality apart from retrieval. Per example and per attribute."""
    from rag import metrics as M
    from rag.data.corpus import read_passages
    from rag.retrieval.gold import GoldRetriever

    system = load_trained(cfg, variant, model_dir, device, retriever=GoldRetriever(read_passages(passages_path), rows))
    primary = TASKS[cfg["task_name"]].primary
    preds = sorted(predict(cfg, system, variant, rows, k=1), key=lambda x: x["id"])
    by_id = {r["id"]: r for r in rows}
    correct = [bool(M.compute(primary, [p["prediction"]], [p["targets"]])) for p in preds]
    attrs: dict[str, list[bool]] = collections.defaultdict(list)
    for p, c in zip(preds, correct):
        attrs[(by_id[p["id"]].get("meta") or {}).get("attribute", "all")].append(c)
    return {"task": cfg["task_name"], "variant": variant, "k": 1, "metric": primary, "n": len(preds),
            "em": 100.0 * sum(correct) / max(1, len(correct)), "id": [p["id"] for p in preds], "correct": correct,
            "by_attribute": {a: {"name": a, "n": len(v), "em": 100.0 * sum(v) / len(v)} for a, v in sorted(attrs.items())},
            "predictions": preds}


def cmd_oracle(args) -> None:
    cfg = read_sections(args.config)
    device = runtime.setup(cfg)
    rows = read_jsonl(Path(args.test), required=("id", "input", "targets"))
    write_json(args.out, oracle_eval(cfg, args.variant, args.model_dir, args.passages, rows, device))


def register(sub) -> None:
    def add(name, func, help_):
        p = sub.add_parser(name, help=help_)
        p.set_defaults(func=func)
        return p

    def retrieval_args(p):
        p.add_argument("--config", required=True, nargs="+", help="config section file(s), merged")
        p.add_argument("--variant", required=True, choices=VARIANTS)
        add_file_args(p)  # the variant's retrieval files (rag/tasks.py RETRIEVERS names them)

    def eval_args(p, required):
        p.add_argument("--dev", required=required, help="dev jsonl to decode")
        p.add_argument("--test", required=required, help="test jsonl to decode")
        for split in ("dev", "test"):
            p.add_argument(f"--{split}-predictions", required=required, help=f"{split} predictions.jsonl to write")
            p.add_argument(f"--{split}-metrics", required=required, help=f"{split} metrics.json to write")

    p = add("train", cmd_train, "fine-tune one task x variant (resumes from its checkpoint)")
    retrieval_args(p)
    p.add_argument("--train-data", required=True, help="the task's train jsonl")
    p.add_argument("--generator", required=True, help="the pretrained generator folder")
    p.add_argument("--init-from", help="start from this model folder (WebQuestions/CuratedTrec start from NQ)")
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--config-hash", default="")
    p.add_argument("--out", required=True)
    eval_args(p, required=False)  # all six: then decode dev and test with the saved model, as `rag evaluate`

    p = add("evaluate", cmd_evaluate, "decode dev and test, score, log to the run")
    retrieval_args(p)
    eval_args(p, required=True)
    p.add_argument("--model-dir", required=True)

    p = add("topk-sweep", cmd_topk_sweep, "Figure 3: test-time K against the task metric and answer recall")
    retrieval_args(p)
    p.add_argument("--test", required=True, help="test jsonl to decode at each K")
    p.add_argument("--experiments-config", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True)

    p = add("oracle", cmd_oracle, "reader quality: decode test with the gold passage as the only document (K = 1)")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--variant", required=True, choices=VARIANTS)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--passages", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--out", required=True)

    p = add("hotswap", cmd_hotswap, "Section 4.5: answer the leader questions with the index of each snapshot")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--variant", required=True, choices=VARIANTS)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--questions", required=True)
    for s in ("a", "b"):
        p.add_argument(f"--passages-{s}", required=True)
        p.add_argument(f"--embeddings-{s}", nargs="+", required=True)
        p.add_argument(f"--index-{s}", required=True)
    p.add_argument("--out", required=True)
