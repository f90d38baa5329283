"""Fine-tuning loop: negative marginal log-likelihood, resumable from checkpoints.

Data order is a pure function of (seed, step), and the checkpoint holds model, optimizer,
scheduler and RNG states (and the fp16 gradient scaler's), so a run stopped at any point and
resumed ends with the same weights as an uninterrupted run. ``precision`` (bf16 | fp16 | fp32):
the forward runs under autocast (``RagSystem.precision``), the loss is fp32, fp16 scales the loss
with a ``torch.amp.GradScaler``. With ``torchrun`` (DDP) each process takes its slice of the
global batch; gradients are averaged by DistributedDataParallel.
"""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path
from typing import Callable

import os

import torch

from rag.errors import ConfigError
from rag.io import atomic_path

log = logging.getLogger(__name__)

CKPT = "checkpoint.pt"


def ddp_setup() -> tuple[int, int]:
    """(rank, world size); under torchrun (WORLD_SIZE > 1) initialise the process group first.

    gloo on CPU, nccl when CUDA is available (each process then uses GPU LOCAL_RANK).
    """
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


def make_optimizer(system, lr: float, qenc_lr: float, train_question_encoder: bool, warmup: int, steps: int):
    groups = [{"params": [p for p in system.generator.parameters() if p.requires_grad], "lr": lr}]
    if train_question_encoder and system.question_encoder is not None:
        groups.append({"params": [p for p in system.question_encoder.parameters() if p.requires_grad], "lr": qenc_lr})
    opt = torch.optim.AdamW(groups, weight_decay=0.01)

    def schedule(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        return max(0.0, 1.0 - (s - warmup) / max(1, steps - warmup))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, schedule)


def save_checkpoint(path: Path, system, opt, sched, step: int, losses: list[float], run: dict | None = None,
                    scaler=None) -> None:
    state = {
        "step": step,
        "run": dict(run or {}),
        "generator": system.generator.state_dict(),
        "question_encoder": system.question_encoder.state_dict() if system.question_encoder is not None else {},
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "losses": torch.tensor(losses, dtype=torch.float64),
    }
    if scaler is not None:
        state["grad_scaler"] = scaler.state_dict()
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: Path, system, opt, sched, run: dict | None = None, scaler=None) -> tuple[int, list[float]]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    saved = state.get("run") or {}
    if run is not None and saved:
        diff = {key: (saved.get(key), run.get(key)) for key in sorted(set(saved) | set(run)) if saved.get(key) != run.get(key)}
        if diff:
            changes = ", ".join(f"{key}: {a!r} in the checkpoint, {b!r} now" for key, (a, b) in diff.items())
            raise ConfigError(f"{path} was written by a run with other training settings ({changes}); "
                              f"delete it to start over")
    system.generator.load_state_dict(state["generator"])
    if system.question_encoder is not None and state["question_encoder"]:
        system.question_encoder.load_state_dict(state["question_encoder"])
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    if scaler is not None and "grad_scaler" in state:
        scaler.load_state_dict(state["grad_scaler"])
    torch.set_rng_state(state["torch_rng"])
    return int(state["step"]), state["losses"].tolist()


def train(system, inputs: list[str], targets: list[str], *, steps: int, batch_size: int, k: int, lr: float,
          qenc_lr: float, train_question_encoder: bool, warmup: int, epsilon: float, seed: int, ckpt_dir: Path,
          checkpoint_every: int, log_every: int, log_fn: Callable[[int, float], None] | None = None,
          progress: bool = True, stop_after: int | None = None, rank: int = 0, world: int = 1,
          ddp_module=None, precision: str | None = None) -> list[float]:
    """Train ``system`` for ``steps`` steps; resume from ``ckpt_dir/checkpoint.pt`` when present.

    ``stop_after`` ends the loop early after that many steps of this call (tests use it to play
    an interruption); ``ddp_module`` is the DistributedDataParallel wrapper when running under
    torchrun, whose forward is ``system.loss``. ``precision`` (default: the system's) sets
    ``system.precision``, the autocast its forward runs under; fp16 adds a gradient scaler.
    """
    from rag import precision as P
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    ckpt = Path(ckpt_dir) / CKPT
    if system.question_encoder is not None:
        system.question_encoder.requires_grad_(train_question_encoder)
    opt, sched = make_optimizer(system, lr, qenc_lr, train_question_encoder, warmup, steps)
    if precision is not None:
        system.precision = precision
    scaler = P.grad_scaler(system.device.type, system.precision)  # None unless fp16
    # what must not change across a resume (the world size may: the global batch is the same)
    run = {"steps": steps, "batch_size": batch_size, "k": k, "lr": lr, "qenc_lr": qenc_lr, "warmup": warmup,
           "epsilon": epsilon, "seed": seed, "train_question_encoder": train_question_encoder, "n": len(inputs)}
    start, losses = 0, []
    if ckpt.is_file():
        start, losses = load_checkpoint(ckpt, system, opt, sched, run, scaler)
        log.info("resumed from %s at step %d", ckpt, start)
    system.train()
    if system.question_encoder is not None and not train_question_encoder:
        system.question_encoder.eval()
    forward = ddp_module if ddp_module is not None else system
    bar = tqdm(range(start, steps), desc="train", unit="step", disable=not progress or rank != 0, initial=start, total=steps)
    done_here = 0
    if world > 1 and batch_size % world:
        raise ConfigError(f"train.batch_size {batch_size} must be a multiple of the number of processes ({world}): "
                          "DDP averages per-process mean losses, equal to the global mean only for equal shards")
    for step in bar:
        idx = batch_indices(len(inputs), step, batch_size, seed)
        idx = idx[rank::world]  # this process's equal shard of the global batch
        q = [inputs[i] for i in idx]
        tgt = system.tokenize_targets([targets[i] for i in idx])
        loss = forward(q, tgt, k, epsilon) if ddp_module is not None else system.loss(q, tgt, k, epsilon)
        if not math.isfinite(float(loss.detach())):
            raise FloatingPointError(f"non-finite loss {float(loss)} at step {step}")
        opt.zero_grad(set_to_none=True)
        params = [p for g in opt.param_groups for p in g["params"]]
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
        if rank == 0 and ((step + 1) % checkpoint_every == 0 or step + 1 == steps):
            save_checkpoint(ckpt, system, opt, sched, step + 1, losses, run, scaler)
        if stop_after is not None and done_here >= stop_after:
            break
    system.eval()
    return losses
