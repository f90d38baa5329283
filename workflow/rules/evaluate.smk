# Evaluation of every model on dev and test; Figure 3 (test-time K sweep) and the index hot-swap.


if not FUSED_EVAL:  # otherwise the train rule decodes dev/test itself (config key evaluate_in_train_job)

    rule evaluate:
        input:
            unpack(retrieval_inputs),
            cfg=lambda w: section(f"task_{w.task}"),
            model="results/runs/{task}/{variant}/model",
            dev="results/data/{task}/dev.jsonl",
            test="results/data/{task}/test.jsonl",
        output:
            **EVAL_OUTPUTS,
        params:
            retrieval=lambda w, input: retrieval_args(w, input),
        threads: CFG["threads"]
        resources:
            runtime=res("evaluate", "runtime", 60),
            mem_mb=res("evaluate", "mem_mb", 4000),
            gpu=res("evaluate", "gpu", 0),
        log:
            "results/logs/evaluate/{task}-{variant}.log",
        benchmark:
            "results/benchmarks/evaluate/{task}-{variant}.tsv"
        conda:
            CONDA
        shell:
            "RAG_THREADS={threads} rag evaluate --config {input.cfg} --variant {wildcards.variant} "
            "--data-dir results/data/{wildcards.task} --model-dir {input.model} {params.retrieval} "
            "--out-dir results/runs/{wildcards.task}/{wildcards.variant} 2> {log}"


rule topk_sweep:
    input:
        unpack(retrieval_inputs),
        cfg=lambda w: section(f"task_{w.task}"),
        exp=section("experiments"),
        model="results/runs/{task}/{variant}/model",
        test="results/data/{task}/test.jsonl",
    output:
        "results/experiments/topk/{task}/{variant}.json",
    params:
        retrieval=lambda w, input: retrieval_args(w, input),
    threads: CFG["threads"]
    log:
        "results/logs/topk/{task}-{variant}.log",
    benchmark:
        "results/benchmarks/topk/{task}-{variant}.tsv"
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads} rag topk-sweep --config {input.cfg} --experiments-config {input.exp} "
        "--variant {wildcards.variant} --data-dir results/data/{wildcards.task} --model-dir {input.model} "
        "{params.retrieval} --out {output} 2> {log}"


rule oracle:
    input:
        cfg=lambda w: section(f"task_{w.task}"),
        model="results/runs/{task}/{variant}/model",
        passages=corpus_passages(NAME),
        test="results/data/{task}/test.jsonl",
    output:
        "results/experiments/oracle/{task}/{variant}.json",
    threads: CFG["threads"]
    log:
        "results/logs/oracle/{task}-{variant}.log",
    benchmark:
        "results/benchmarks/oracle/{task}-{variant}.tsv"
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads} rag oracle --config {input.cfg} --variant {wildcards.variant} --model-dir {input.model} "
        "--passages {input.passages} --test {input.test} --out {output} 2> {log}"


rule hotswap:
    input:
        cfg=section("task_nq"),
        model="results/runs/nq/{variant}/model",
        questions="results/data/hotswap/questions.jsonl",
        passages_a=corpus_passages(NAME),
        emb_a=shard_files(NAME),
        index_a=index_file(NAME),
        passages_b=corpus_passages(f"{NAME}_b"),
        emb_b=shard_files(f"{NAME}_b"),
        index_b=index_file(f"{NAME}_b"),
    output:
        "results/experiments/hotswap/{variant}.json",
    threads: CFG["threads"]
    log:
        "results/logs/hotswap/{variant}.log",
    benchmark:
        "results/benchmarks/hotswap/{variant}.tsv"
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads} rag hotswap --config {input.cfg} --variant {wildcards.variant} "
        "--model-dir {input.model} --questions {input.questions} "
        "--passages-a {input.passages_a} --embeddings-a {input.emb_a} --index-a {input.index_a} "
        "--passages-b {input.passages_b} --embeddings-b {input.emb_b} --index-b {input.index_b} --out {output} 2> {log}"
