"""The generator stage: the shared generator every fine-tune starts from (rule ``pretrain_generator``):
a named pretrained one copied, or a tokenizer and a model of the configured family (BART, or a
decoder-only Llama for ``generator.family: causal_lm``) built and pretrained on the corpus."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from rag.io import atomic_dir, read_jsonl, write_json
from rag.sections import GeneratorSection


def copy_pretrained_generator(cfg: GeneratorSection, out: str | Path) -> None:
    """``generator.init: pretrained``: save ``generator.name_or_path`` (weights and tokenizer) as the folder
    ``out``; a causal LM (``generator.family``) with its settings (rag.models.causal_lm)."""
    from rag.models.interface import generator_class

    g = cfg.generator
    family = generator_class(g.family)
    model, tok = family.load_model(g.name_or_path)
    with atomic_dir(out) as tmp:
        family.from_options(model, tok, g).save(tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / "pretrain.json", {"init": "pretrained", "name_or_path": g.name_or_path})


def pretrain_generator(cfg: GeneratorSection, device: str, passages: list[str | Path], out: str | Path, *,
                       restatements: str | Path | None = None, checkpoint_dir: str | Path | None = None) -> None:
    """``generator.init: scratch``: train the tokenizer on the passages, build the configured generator
    on ``device`` and pretrain it (:func:`rag.training.pretrain`, also on ``restatements``), resumable
    from ``checkpoint_dir``; writes the folder ``out`` with ``pretrain.json``."""
    from rag.data.corpus import read_passages
    from rag.models.interface import generator_class
    from rag.models.pretraining_data import Restatements
    from rag.models.tokenizer import label_token, save_tokenizer, train_tokenizer
    from rag.tasks import FEVER3_LABELS
    from rag.training import TrainRun, loss_curve, pretrain

    g = cfg.generator
    texts: list[str] = []
    titles: list[str] = []
    ids: list[str] = []
    for path in passages:
        p = read_passages(path)
        titles += p.titles
        texts += p.texts
        ids += p.ids
    records = read_jsonl(restatements) if restatements else None
    pools = None
    if records is not None and g.pretrain_counterfactuals == "kind":
        from rag.data.miniworld import kind_pools

        pools = kind_pools(ids, titles)
    restated = Restatements(records, ids, pools) if records is not None else None
    ckpt_dir = identity = None
    hold = contextlib.ExitStack()
    if checkpoint_dir:  # the checkpoint is resumed by the same configuration and inputs only
        from rag.io import run_lock
        from rag.manifest import canonical_hash

        hold.enter_context(run_lock(checkpoint_dir, f"the pretraining of the generator {out}"))
        ckpt_dir = Path(checkpoint_dir)
        identity = {"config_hash": canonical_hash({"config": cfg.to_dict(), "passages": [ids, titles, texts],
                                                   "restatements": records}, 12)}
    with hold, atomic_dir(out) as tmp:
        tok = train_tokenizer([f"{a} {b}" for a, b in zip(titles, texts)], g.vocab_size,
                                [label_token(lb) for lb in FEVER3_LABELS], tmp)
        generator = generator_class(g.family).from_scratch(tok, g, device)
        t = time.time()
        losses = pretrain(generator, titles, texts, g, TrainRun(ckpt_dir, cfg.seed, identity, precision=cfg.precision),
                          restated)
        generator.save(tmp)
        save_tokenizer(tok, tmp, g.max_source_len)  # as the run tokenizes, also after a resume at the last step
        write_json(tmp / "pretrain.json", {"init": "scratch", "steps": g.pretrain_steps, "seconds": time.time() - t,
                                           "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
                                           "curve": loss_curve(losses)})
