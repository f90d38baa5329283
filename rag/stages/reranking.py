"""A reranker's cross-encoder for a task (rule ``train_reranker``): a declared rerank retriever's ``model``
saved as it is (``train_steps: 0``: a cross-encoder already) or fine-tuned from it on the task's training
questions, each question's gold passage against the first stage's other passages of its top ``depth``.

Objective: per question, one positive (a gold passage: ``meta.gold_docs`` names it or its article; without
gold passages, a passage of the first stage's list holding an answer) and ``negatives`` passages of the first
stage's list that are not gold, scored by the cross-encoder; the cross-entropy of the positive among them
(the listwise loss of a reranker trained on retriever negatives). The cross-encoder starts from ``model``:
a sequence classifier of one label, or any encoder folder (the default's MiniLM), which gets a new
one-label head.

The job then scores the first stage's top ``depth`` of every question of ``score_data`` (the task's splits)
with the cross-encoder it saves, into the folder's pair logits (rag.retrieval.rerank.PAIR_LOGITS): the task's
fine-tunes over this reranker read them, so the pairs of a frozen first stage are scored once for all of
them, not once a fine-tune.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

from rag.errors import DataError
from rag.io import atomic_dir, read_jsonl, write_json
from rag.retrieval import RetrievalFiles, build_retriever
from rag.sections import TrainSection

log = logging.getLogger(__name__)


def positives(row: dict, ids: list[int], passages, regex: bool = False) -> list[int]:
    """The passage rows that answer ``row`` among its first-stage rows ``ids`` and its gold passages: gold
    passages (``meta.gold_docs``: passage ids, or article ids whose passages all count), else the listed
    rows whose text holds an answer."""
    gold = set((row.get("meta") or {}).get("gold_docs") or ())
    if gold:
        row_of = passages.index_of()
        named = [row_of[d] for d in sorted(gold) if d in row_of]
        return sorted(set(named) | {j for j in ids if passages.doc_entity(j) in gold})
    from rag.scoring.answer_match import answer_in_text

    return [j for j in ids if answer_in_text(passages.texts[j], row["targets"], regex=regex)]


def train_reranker(cfg: TrainSection, name: str, train_data: str, files: RetrievalFiles, out: str, device: str,
                   score_data: list[str] = ()) -> dict:
    """The cross-encoder of declared rerank retriever ``name`` (``cfg.retrievers``) for ``cfg``'s task, saved to
    ``out`` (a model folder :meth:`rag.retrieval.rerank.RerankRetriever.load` reads) with the pair logits of
    the questions of ``score_data`` (jsonl files); its training record."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rag.models.folder import loading
    from rag.retrieval.encoders import resolve_model_path
    from rag.retrieval.rerank import PAIR_LOGITS, RerankRetriever, check_cross_encoder_config, passage_text
    from rag.tasks import TASKS

    opts = cfg.retrievers[name]["options"]
    path = resolve_model_path(opts["model"])
    steps = opts["train_steps"]
    with loading(path, "cross-encoder"):
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    if steps == 0:
        problem = check_cross_encoder_config(model.config, f"config key 'retrievers.{name}.options.model' ({path})")
        if problem is not None:
            raise DataError(f"{problem}; with train_steps 0 it is used as it is: give a cross-encoder, or train_steps > 0")
    model.to(device)
    record = {"retriever": name, "task": cfg.task_name, "model": opts["model"], "steps": steps, "losses": []}
    first = build_retriever(opts["first_stage"], files, cfg.retriever, device, None, cfg.retrievers)
    passages = first.passages
    if steps > 0:
        rows = read_jsonl(train_data, required=("input", "targets"))
        regex = TASKS[cfg.task_name].regex_targets
        depth, n_neg = opts["depth"], opts["negatives"]
        examples = []
        with torch.no_grad():
            for start in range(0, len(rows), 64):
                chunk = rows[start:start + 64]
                got = first.retrieve([r["input"] for r in chunk], depth)
                for r, ids in zip(chunk, got.ids.tolist()):
                    pos = positives(r, ids, passages, regex)
                    gold = set(pos)
                    neg = [j for j in ids if j not in gold]
                    if pos and neg:
                        examples.append((r["input"], pos, neg))
        if not examples:
            raise DataError(f"{train_data}: no training question has both a gold passage and another passage among the "
                            f"first stage's top {depth}: nothing to train retrievers.{name}'s reranker on")
        reranker = RerankRetriever(first, model, tokenizer, passages, depth, max_length=opts["max_length"],
                                   batch_size=opts["batch_size"])
        rng = random.Random(cfg.seed)
        torch.manual_seed(cfg.seed)
        optim = torch.optim.AdamW(model.parameters(), lr=opts["train_lr"])
        model.train()
        batch = opts["train_batch_questions"]
        for step in range(steps):
            picked = [examples[rng.randrange(len(examples))] for _ in range(batch)]
            questions, texts = [], []
            for question, pos, neg in picked:
                group = [rng.choice(pos)] + rng.sample(neg, min(n_neg, len(neg)))
                group += [rng.choice(neg) for _ in range(n_neg + 1 - len(group))]  # a short list: repeats
                questions += [question] * len(group)
                texts += [passage_text(passages.titles[j], passages.texts[j]) for j in group]
            logits = reranker.pair_logits(questions, texts).view(batch, n_neg + 1)
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(batch, dtype=torch.long, device=logits.device))
            optim.zero_grad()
            loss.backward()
            optim.step()
            record["losses"].append(round(float(loss), 6))
            if (step + 1) % max(1, steps // 10) == 0:
                log.info("reranker %s/%s: step %d/%d, loss %.4f", name, cfg.task_name, step + 1, steps, float(loss))
        record["examples"] = len(examples)
    model.eval().requires_grad_(False)
    scorer = RerankRetriever(first, model, tokenizer, passages, opts["depth"], max_length=opts["max_length"],
                             batch_size=opts["batch_size"])
    questions = list(dict.fromkeys(r["input"] for path in score_data for r in read_jsonl(path, required=("input",))))
    scorer.score_lists(questions, progress=True)
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record["scored"] = {"questions": len(questions), "pairs": scorer.write_pair_logits(Path(tmp) / PAIR_LOGITS)}
        write_json(Path(tmp) / "reranker.json", record)
    log.info("reranker %s/%s: %d pairs of %d questions scored", name, cfg.task_name, record["scored"]["pairs"], len(questions))
    return record
