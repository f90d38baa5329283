# The shared generator (built and pretrained once on the corpus), and each further generator of
# config key generators (pretrain_generators), then one fine-tune per task x variant. WebQuestions and CuratedTrec start from the NQ model of the same variant.


rule pretrain_generator:
    input:
        cfg=section("generator"),
        passages=[corpus_passages(NAME)],
        **({"restatements": f"{R}/corpus/{NAME}/restatements.jsonl"} if CFG["corpus"]["source"] == "miniworld" else {}),
    output:
        directory(f"{R}/generator/model"),
    params:
        restatements=lambda w, input: ["--restatements", input.restatements] if "restatements" in input.keys() else [],
        ckpt=f"{R}/generator/checkpoint",
        record=record_file("pretrain_generator"),
        **model_sha256("generator.name_or_path"),
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
        "RAG_THREADS={threads:q} rag-record --out {params.record:q} -- rag pretrain --config {input.cfg:q} --passages {input.passages:q} {params.restatements:q} "
        "--checkpoint-dir {params.ckpt:q} --out {output:q} 2> {log:q}"


use rule pretrain_generator as pretrain_generators with:
    input:
        cfg=section("generator_{generator}"),
        passages=[corpus_passages(NAME)],
        **({"restatements": f"{R}/corpus/{NAME}/restatements.jsonl"} if CFG["corpus"]["source"] == "miniworld" else {}),
    output:
        directory(f"{R}/generators/{{generator}}/model"),
    params:
        restatements=lambda w, input: ["--restatements", input.restatements] if "restatements" in input.keys() else [],
        ckpt=f"{R}/generators/{{generator}}/checkpoint",
        record=record_file("pretrain_generators", "generator"),
        **({"model_sha256": lambda w: local_sha256(f"generators.{w.generator}.generator.name_or_path")}
           if local_sha256("generators") else {}),
    log:
        f"{R}/logs/pretrain_generators/{{generator}}.log",


rule train:
    input:
        unpack(retrieval_inputs),
        unpack(init_from),
        # evaluate_in_train_job: the job also decodes dev/test, so it reads the eval_<task> section too
        cfg=lambda w: task_sections(w, evaluation=FUSED_EVAL),
        data=f"{R}/data/{{task}}/train.jsonl",
        generator=generator_model,
        store=f"{R}/mlflow.ready",
        **({"dev": f"{R}/data/{{task}}/dev.jsonl", "test": f"{R}/data/{{task}}/test.jsonl"} if FUSED_EVAL else {}),
    output:
        model=directory(f"{RUN}/model"),
        **(EVAL_OUTPUTS if FUSED_EVAL else {}),
    params:
        retrieval=lambda w, input: retrieval_args(w, input),
        init=lambda w, input: ["--init-from", input.init] if "init" in input.keys() else [],
        ckpt=f"{RUN}/checkpoint",
        config_hash=train_config_hash,
        evaluate=fused_eval_args,
        **(METRIC_FILES if FUSED_EVAL else {}),
        **QUESTION_ENCODER,
        # train.ddp_processes > 1: data-parallel training, one process per device, through torchrun; an end-to-end
        # retriever refreshed asynchronously: its training process and its encoder processes (rag.runs.train_processes)
        launcher=lambda w: (["torchrun", "--standalone", "--nproc-per-node", str(train_processes(CFG, w.variant)), "-m"]
                            if train_processes(CFG, w.variant) > 1 else []),
        record=record_file("train", "task", "variant", "seed"),
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
        "RAG_THREADS={threads:q} rag-record --out {params.record:q} -- {params.launcher:q} rag train --seed {wildcards.seed:q} --config {input.cfg:q} --variant {wildcards.variant:q} "
        "--train-data {input.data:q} --generator {input.generator:q} {params.retrieval:q} {params.init:q} "
        "--checkpoint-dir {params.ckpt:q} --config-hash {params.config_hash:q} --out {output.model:q} {params.evaluate:q} 2> {log:q}"
