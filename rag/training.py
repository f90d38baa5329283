"""The training loop (:func:`optimize`) of fine-tuning (:func:`train`) and generator pretraining
(:func:`pretrain`), its checkpoint (:class:`Checkpoint`) and the DDP set-up. The data order is a
pure function of (seed, step) or of a checkpointed sampler, so a resumed run ends with the weights
of an uninterrupted one.
"""

from __future__ import annotations

import logging
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from rag.errors import ConfigError
from rag.io import atomic_path
from rag.models.pretraining_data import Restatements, cloze_example, curriculum_window
from rag.tasks import FEVER3_LABELS

if TYPE_CHECKING:
    from rag.config_keys import Generator, Train

log = logging.getLogger(__name__)

CKPT = "checkpoint.pt"


def ddp_setup() -> tuple[int, int]:
    """(rank, world size); under torchrun (WORLD_SIZE > 1) initialise the process group first
    (nccl on GPU LOCAL_RANK when CUDA is available, else gloo)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def batch_indices(n: int, step: int, batch_size: int, seed: int) -> list[int]:
    """Indices of the global batch at ``step``: epochs are seeded shuffles of range(n)."""
    per_epoch = max(1, n // batch_size)
    epoch, offset = divmod(step, per_epoch)
    order = list(range(n))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order[offset * batch_size : (offset + 1) * batch_size]


def make_optimizer(system, t: Train, train_question_encoder: bool, train_passage_encoder: bool = False):
    """AdamW over the generator (``t.lr``) and the retriever's encoders that train (``t.question_encoder_lr``: the
    question encoder's, then the passage encoder's parameters it does not share), with ``t.warmup_steps`` of warm-up and
    linear decay to ``t.steps``."""
    lr, qenc_lr, warmup, steps = t.lr, t.question_encoder_lr, t.warmup_steps, t.steps
    trained = [p for p in system.generator.parameters() if p.requires_grad]  # none: a frozen generator
    groups = [{"params": trained, "lr": lr}] if trained else []
    if train_question_encoder and system.question_encoder is not None:
        groups.append({"params": [p for p in system.question_encoder.parameters() if p.requires_grad], "lr": qenc_lr})
    if train_passage_encoder and system.context_encoder is not None:
        taken = {id(p) for g in groups for p in g["params"]}  # shared with the question encoder: optimised once
        own = [p for p in system.context_encoder.parameters() if p.requires_grad and id(p) not in taken]
        if own:
            groups.append({"params": own, "lr": qenc_lr})
    opt = torch.optim.AdamW(groups, weight_decay=0.01)

    def schedule(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        return max(0.0, 1.0 - (s - warmup) / max(1, steps - warmup))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, schedule)


class Checkpoint:
    """The checkpoint of every resumable loop: step, losses, the state of each of ``modules`` (None: not
    trained), optimizer, scheduler, gradient scaler, torch RNG, the loop's ``extra`` state and
    ``identity`` (what the run was configured with: a checkpoint of another is not resumed)."""

    def __init__(self, path: str | Path, identity: dict, modules: dict[str, torch.nn.Module | None]):
        self.path = Path(path)
        self.identity = dict(identity)
        self.modules = modules

    def save(self, opt, sched, step: int, losses: list[float], scaler=None, extra: dict | None = None,
             final: bool = False) -> None:
        state = {
            "step": step,
            "run": self.identity,
            **{name: (m.state_dict() if m is not None else {}) for name, m in self.modules.items()},
            "optimizer": None if final else opt.state_dict(),
            "scheduler": None if final else sched.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "losses": torch.tensor(losses, dtype=torch.float64),
            "extra": dict(extra or {}),
        }
        if scaler is not None and not final:
            state["grad_scaler"] = scaler.state_dict()
        with atomic_path(self.path) as tmp:
            torch.save(state, tmp)

    KEYS = ("step", "run", "optimizer", "scheduler", "torch_rng", "losses")

    def load(self, opt, sched, scaler=None) -> tuple[int, list[float], dict]:
        """(step, losses, extra state) restored from the checkpoint; (0, [], {}) when there is none,
        when it was written under another configuration, or when it cannot be read (set aside as
        ``checkpoint.pt.corrupt-<n>``, with a warning)."""
        if not self.path.is_file():
            return 0, [], {}
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
            missing = [k for k in self.KEYS if k not in state] if isinstance(state, dict) else list(self.KEYS)
            if missing:
                raise ValueError(f"no {', '.join(missing)} in it")
        except Exception as exc:  # torch: RuntimeError (zip archive), EOFError (an empty file), UnpicklingError
            size = self.path.stat().st_size
            first = " ".join(str(exc).split()).split(". ")[0][:160]  # torch adds sentences of advice
            why = "an empty file" if size == 0 else f"{type(exc).__name__}: {first}"
            aside = self._set_aside()
            log.warning("checkpoint %s is unreadable (%s; truncated or corrupt); set it aside as %s and starting this "
                        "run over from step 0", self.path, why, aside)
            return 0, [], {}
        saved = state.get("run") or {}
        diff = [key for key in sorted(set(saved) | set(self.identity)) if saved.get(key) != self.identity.get(key)]
        if diff:
            changes = ", ".join(f"{key}: {saved.get(key)!r} in the checkpoint, {self.identity.get(key)!r} now" for key in diff)
            log.warning("not resuming %s: it was written under another configuration (%s); starting over",
                        self.path, changes)
            return 0, [], {}
        for name, m in self.modules.items():
            if m is not None and state.get(name):
                m.load_state_dict(state[name])
        if state["optimizer"] is not None:  # None: saved after the last step, nothing left to optimise
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
        if scaler is not None and "grad_scaler" in state:
            scaler.load_state_dict(state["grad_scaler"])
        torch.set_rng_state(state["torch_rng"])
        log.info("resumed from %s at step %d", self.path, int(state["step"]))
        return int(state["step"]), state["losses"].tolist(), state.get("extra") or {}


    def _set_aside(self) -> Path:
        """Rename the checkpoint to the first free ``<name>.corrupt-<n>``; that path."""
        n = 1
        while (aside := self.path.with_name(f"{self.path.name}.corrupt-{n}")).exists():
            n += 1
        os.rename(self.path, aside)
        return aside


@dataclass(frozen=True)
class TrainRun:
    """How a training run (fine-tuning or pretraining) runs, apart from what it learns (its config section): the
    checkpoint folder (None: none) and the ``identity`` a resume must match, the seed, logging, the progress bar, an
    early stop, the DDP processes (this one's ``rank`` of ``world``, ``ddp_module`` the DistributedDataParallel
    wrapper under torchrun) and the precision (None: the system's; fp32 for pretraining)."""

    ckpt_dir: Path | None
    seed: int
    identity: dict | None = None
    log_fn: Callable[[int, float], None] | None = None
    progress: bool = True
    stop_after: int | None = None
    rank: int = 0
    world: int = 1
    ddp_module: Any = None
    precision: str | None = None


def optimize(step_loss: Callable[[int], torch.Tensor], params: list, opt, sched, how: TrainRun, *, steps: int,
             start: int = 0, losses: list[float] | None = None, scaler=None, checkpoint: Checkpoint | None = None,
             checkpoint_every: int = 100, extra_state: Callable[[], dict] | None = None, log_every: int = 50,
             desc: str = "train", after_step: Callable[[int], None] | None = None) -> list[float]:
    """Steps ``start`` .. ``steps`` - 1 of ``step_loss(step)`` (gradients clipped to norm 1), run as ``how`` says (its
    logging, progress bar, early stop, DDP rank and world); returns ``losses`` extended with each step's loss (the
    mean over DDP processes). ``after_step(steps done)`` runs after each step but the last, before ``checkpoint`` is
    saved (every ``checkpoint_every`` steps and after the last); ``how.stop_after`` ends this call early."""
    from tqdm.auto import tqdm

    rank, world, log_fn, stop_after = how.rank, how.world, how.log_fn, how.stop_after
    losses = [] if losses is None else losses
    bar = tqdm(range(start, steps), desc=desc, unit="step", disable=not how.progress or rank != 0, initial=start, total=steps)
    done_here = 0
    for step in bar:
        loss = step_loss(step)
        if not math.isfinite(float(loss.detach())):
            raise FloatingPointError(f"non-finite loss {float(loss)} at step {step}")
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
        else:  # fp16: scaled loss; unscale before clipping; the step is skipped on inf/nan gradients
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            scaler.step(opt)
            scaler.update()
        sched.step()
        value = loss.detach().float()
        if world > 1:  # log the global-batch mean, the same on every rank
            torch.distributed.all_reduce(value)
            value = value / world
        losses.append(float(value))
        if log_fn and (step + 1) % log_every == 0 and rank == 0:
            log_fn(step + 1, sum(losses[-log_every:]) / len(losses[-log_every:]))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        done_here += 1
        if after_step is not None and step + 1 < steps:
            after_step(step + 1)
        if checkpoint is not None and rank == 0 and ((step + 1) % checkpoint_every == 0 or step + 1 == steps):
            checkpoint.save(opt, sched, step + 1, losses, scaler, extra_state() if extra_state else None,
                            final=step + 1 == steps)
        if stop_after is not None and done_here >= stop_after:
            break
    return losses


def train(system, inputs: list[str], targets: list[str], t: Train, how: TrainRun, *, train_question_encoder: bool,
          train_passage_encoder: bool = False, keeper=None) -> list[float]:
    """Train ``system`` for ``t.steps`` steps (the train section ``t``), resumed from ``how.ckpt_dir/checkpoint.pt``
    written under the same settings and identity. ``train_passage_encoder``: the retriever's passage encoder
    (``system.context_encoder``) trains too, at the question encoder's learning rate, its index kept by ``keeper``
    (:class:`rag.retrieval.refresh.IndexKeeper`; None: the index as it is), whose state the checkpoint holds; the
    keeper is closed when training ends."""
    from rag import precision as P

    seed, world = how.seed, how.world
    torch.manual_seed(seed)
    if system.question_encoder is not None:
        system.question_encoder.requires_grad_(train_question_encoder)
    cenc = system.context_encoder
    if train_passage_encoder and cenc is None:
        raise ValueError("train_passage_encoder: the retriever has no passage encoder to train (DenseRetriever context_encoder)")
    if cenc is not None:
        cenc.requires_grad_(train_passage_encoder)
    opt, sched = make_optimizer(system, t, train_question_encoder, train_passage_encoder)
    if how.precision is not None:
        system.precision = how.precision
    scaler = P.grad_scaler(system.device.type, system.precision)  # None unless fp16
    if world > 1 and t.batch_size % world:
        raise ConfigError(f"train.batch_size {t.batch_size} must be a multiple of the number of processes ({world}): "
                          "DDP averages per-process mean losses, equal to the global mean only for equal shards")
    # what must not change across a resume (the world size may: the global batch is the same)
    run = {"steps": t.steps, "batch_size": t.batch_size, "k": t.k, "lr": t.lr, "qenc_lr": t.question_encoder_lr,
           "warmup": t.warmup_steps, "epsilon": t.label_smoothing, "seed": seed,
           "train_question_encoder": train_question_encoder, "n": len(inputs),
           **({"train_passage_encoder": True} if train_passage_encoder else {}),
           **({"index_refresh": vars(keeper.options)} if keeper is not None else {}),
           **({"objective": system.objective, "objective_temperature": system.objective_temperature}
              if system.objective != "marginal" else {}),
           **(how.identity or {})}
    # a frozen question encoder is the one the run was given: a resume loads it again, the checkpoint leaves it out
    trained_qenc = system.question_encoder if train_question_encoder else None
    modules = {"generator": system.generator, "question_encoder": trained_qenc}
    if train_passage_encoder:
        modules["context_encoder"] = cenc
    ckpt = Checkpoint(Path(how.ckpt_dir) / CKPT, run, modules)
    start, losses, extra = ckpt.load(opt, sched, scaler)
    if keeper is not None:
        keeper.start(extra.get("index"))
    system.train()
    if system.question_encoder is not None and not train_question_encoder:
        system.question_encoder.eval()
    if cenc is not None and not train_passage_encoder:
        cenc.eval()
    forward = how.ddp_module if how.ddp_module is not None else system.loss

    def step_loss(step: int) -> torch.Tensor:
        idx = batch_indices(len(inputs), step, t.batch_size, seed)
        idx = idx[how.rank::world]  # this process's equal shard of the global batch
        q = [inputs[i] for i in idx]
        tgt = system.tokenize_targets([targets[i] for i in idx])
        return forward(q, tgt, t.k, t.label_smoothing)

    params = [p for g in opt.param_groups for p in g["params"]]
    try:
        optimize(step_loss, params, opt, sched, how, steps=t.steps, start=start, losses=losses, scaler=scaler,
                 checkpoint=ckpt, checkpoint_every=t.checkpoint_every, log_every=t.log_every,
                 extra_state=(lambda: {"index": keeper.state()}) if keeper is not None else None,
                 after_step=keeper.after_step if keeper is not None else None)
    finally:
        if keeper is not None:
            keeper.close()
    system.eval()
    return losses


PRETRAIN_LOG_EVERY = 50  # steps per point of the pretraining loss curve
PRETRAIN_CHECKPOINT_EVERY = 100


def pretrain(generator, titles: list[str], texts: list[str], g: Generator, how: TrainRun,
             restatements: Restatements | None = None, checkpoint_every: int = PRETRAIN_CHECKPOINT_EVERY) -> list[float]:
    """Pretrain ``generator`` (its model and tokenizer; built by its family's ``from_scratch``) for
    ``g.pretrain_steps`` steps on cloze examples and a share ``g.pretrain_restatements`` of each batch from
    ``restatements`` (:class:`Restatements`; shares ``g.pretrain_claims``, ``g.pretrain_sentences``,
    ``g.pretrain_absent`` of those); resumable from ``how.ckpt_dir/checkpoint.pt`` (None: no checkpoint), at
    ``how.precision`` (None: fp32)."""
    from rag import precision as P
    from rag.models.seq2seq import chunk_overhead_for

    model, tokenizer, seed, precision = generator.model, generator.tokenizer, how.seed, how.precision or "fp32"
    steps, batch_size, lr = g.pretrain_steps, g.pretrain_batch_size, g.pretrain_lr
    restatement_share, claim_share = g.pretrain_restatements, g.pretrain_claims
    sentence_share, absent_share = g.pretrain_sentences, g.pretrain_absent
    device = next(model.parameters()).device
    overhead = chunk_overhead_for(device.type, g.chunk_overhead)
    scaler = P.grad_scaler(device.type, precision)

    rng = random.Random(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100) * max(0.0, 1 - s / max(1, steps)))
    start, losses, ckpt = 0, [], None
    if how.ckpt_dir is not None:
        run = {"steps": steps, "batch_size": batch_size, "lr": lr, "max_source_len": g.max_source_len, "seed": seed,
               "precision": precision, "restatement_share": restatement_share, "claim_share": claim_share,
               "sentence_share": sentence_share, "n": len(texts), **(how.identity or {}),
               **({"absent_share": absent_share} if absent_share else {})}
        ckpt = Checkpoint(Path(how.ckpt_dir) / CKPT, run, {"generator": model})
        start, losses, extra = ckpt.load(opt, sched, scaler)
        if start:
            version, state, gauss = extra["sampler_rng"]
            rng.setstate((version, tuple(state), gauss))
    model.train()

    def step_loss(step: int) -> torch.Tensor:
        pairs = []
        window = curriculum_window(step, steps)
        while len(pairs) < batch_size:
            if restatements is not None and rng.random() < restatement_share:
                u = rng.random()
                if u < claim_share:
                    pairs.append(restatements.claim(titles, texts, rng, FEVER3_LABELS, window))
                elif u < claim_share + sentence_share:
                    pairs.append(restatements.sentence(titles, texts, rng, window))
                elif u < claim_share + sentence_share + absent_share:
                    pairs.append(restatements.absent(titles, texts, rng, tokenizer.mask_token, window))
                else:
                    pairs.append(restatements.example(titles, texts, rng, tokenizer.mask_token, window))
                continue
            i = rng.randrange(len(texts))
            ex = cloze_example(titles[i], texts[i], rng, tokenizer.mask_token, window)
            if ex:
                pairs.append(ex)
        ids, mask = generator.tokenize_sources([p[0] for p in pairs])
        tgt = generator.tokenize_targets([p[1] for p in pairs])
        with P.autocast(device.type, precision):
            ll, _ = generator.target_logprobs(ids, mask, tgt, tokenizer.pad_token_id, False, overhead)
        return -ll.float().sum(1).mean()

    def sampler_state() -> dict:
        version, state, gauss = rng.getstate()
        return {"sampler_rng": [version, list(state), gauss]}

    return optimize(step_loss, list(model.parameters()), opt, sched, how, steps=steps, start=start, losses=losses,
                    scaler=scaler, checkpoint=ckpt, checkpoint_every=checkpoint_every, extra_state=sampler_state,
                    log_every=PRETRAIN_LOG_EVERY, desc="pretrain")


def loss_curve(losses: list[float], every: int = PRETRAIN_LOG_EVERY) -> list[tuple[int, float]]:
    """(step, mean loss of the ``every`` steps up to it) at every ``every``-th step."""
    return [(s, sum(losses[s - every : s]) / every) for s in range(every, len(losses) + 1, every)]
