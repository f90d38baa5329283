"""The torchrun worker of the async index refresh test: rank 0 trains the tiny RAG-Token system with its passage
encoder, the index kept by the async strategy; rank 1 is the encoder process (rag.retrieval.refresh.serve).

    torchrun --nproc-per-node 2 tests/refresh_worker.py OUT.pt CKPT_DIR STEPS [STOP_AFTER]

Each training step also sleeps 50 ms (a step of a real model is longer than the tiny corpus's encoding), so an
encoding comes back while training goes on. Rank 0 saves the parameters, losses, the keeper's records and its
index's size to OUT.pt.
"""

from __future__ import annotations

import os
import sys
import time

import torch


def main() -> None:
    import torch.distributed as dist

    from ddp_worker import make_system, make_world, run_training
    from rag.retrieval.refresh import DistributedEncoding, IndexKeeper, RefreshOptions, serve

    torch.set_num_threads(1)
    out, ckpt_dir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    stop_after = int(sys.argv[4]) if len(sys.argv) > 4 else None
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 1:
        system = make_system(make_world(seed=3), "token", passage_encoder="separate")
        served = serve(system.retriever.context_encoder, system.passages, (0, len(system.passages)))
        print(f"encoder rank: {served} encodings", flush=True)
    else:
        world = make_world(seed=3)
        slow = IndexKeeper.after_step

        def after_step(self, step):
            time.sleep(0.05)
            slow(self, step)

        IndexKeeper.after_step = after_step
        channel = DistributedEncoding([1], len(world.passages), world.doc_emb.shape[1])
        keepers = []
        params, losses = run_training(ckpt_dir, steps=steps, checkpoint_every=2, passage_encoder="separate",
                                      refresh=RefreshOptions("async", every=2), channel=channel, keepers=keepers,
                                      stop_after=stop_after)
        keeper = keepers[0]
        torch.save({"params": params, "losses": torch.tensor(losses, dtype=torch.float64), "records": keeper.records,
                    "ntotal": int(keeper.retriever.index.ntotal) if keeper.records else -1,
                    "n": len(world.passages)}, out)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # gloo teardown can hang at interpreter exit on some machines; the result is on disk


if __name__ == "__main__":
    main()
