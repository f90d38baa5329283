# The shared generator (built and pretrained once on the corpus), then one fine-tune per
# task x variant. WebQuestions and CuratedTrec start from the NQ model of the same variant.


rule pretrain_generator:
    input:
        cfg=section("generator"),
        passages=[corpus_passages(NAME)],
        **({"restatements": f"{R}/corpus/{NAME}/restatements.jsonl"} if CFG["corpus"]["source"] == "miniworld" else {}),
    output:
        directory(f"{R}/generator/model"),
    params:
        restatements=lambda w, input: f"--restatements {input.restatements}" if "restatements" in input.keys() else "",
        ckpt=f"{R}/generator/checkpoint",
        record=record("pretrain_generator"),
    priority: 50  # the critical path: every fine-tune waits for it
    threads: 8  # snakemake lowers it to --cores on a small machine
    resources:
        runtime=res("pretrain_generator", "runtime", 120),
        mem_mb=res("pretrain_generator", "mem_mb", 8000),
        gpu=res("pretrain_generator", "gpu", 0),
    log:
        f"{R}/logs/pretrain_generator.log",
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads} rag --record {params.record} pretrain --config {input.cfg} --passages {input.passages} {params.restatements} "
        "--checkpoint-dir {params.ckpt} --out {output} 2> {log}"


rule train:
    input:
        unpack(retrieval_inputs),
        unpack(init_from),
        # evaluate_in_train_job: the job also decodes dev/test, so it reads the eval_<task> section too
        cfg=task_sections if FUSED_EVAL else lambda w: section(f"train_{w.task}"),
        data=f"{R}/data/{{task}}/train.jsonl",
        generator=f"{R}/generator/model",
        store=f"{R}/mlflow.ready",
        **({"dev": f"{R}/data/{{task}}/dev.jsonl", "test": f"{R}/data/{{task}}/test.jsonl"} if FUSED_EVAL else {}),
    output:
        model=directory(f"{RUN}/model"),
        **(EVAL_OUTPUTS if FUSED_EVAL else {}),
    params:
        retrieval=lambda w, input: retrieval_args(w, input),
        init=lambda w, input: f"--init-from {input.init}" if "init" in input.keys() else "",
        ckpt=f"{RUN}/checkpoint",
        config_hash=train_config_hash,
        evaluate=fused_eval_args,
        # train.ddp_processes > 1: data-parallel training, one process per device, through torchrun
        launcher=(f"torchrun --standalone --nproc-per-node {CFG['train']['ddp_processes']} -m"
                  if CFG["train"]["ddp_processes"] > 1 else ""),
        record=record("train"),
    priority: train_priority
    threads: CFG["threads"]
    resources:
        runtime=res("train", "runtime", 60),
        mem_mb=res("train", "mem_mb", 4000),
        gpu=res("train", "gpu", 0),
    log:
        f"{R}/logs/train/{{task}}-{{variant}}-seed{{seed}}.log",
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads} {params.launcher} rag --record {params.record} train --seed {wildcards.seed} --config {input.cfg} --variant {wildcards.variant} "
        "--train-data {input.data} --generator {input.generator} {params.retrieval} {params.init} "
        "--checkpoint-dir {params.ckpt} --config-hash {params.config_hash:q} --out {output.model} {params.evaluate} 2> {log}"
