# Evaluation of every model on dev and test; Figure 3 (test-time K sweep), the oracle and the
# index hot-swap. Jobs that load a task's model read its train_<task> and eval_<task> sections.


if not FUSED_EVAL:  # otherwise the train rule decodes dev/test itself (config key evaluate_in_train_job)

    rule evaluate:
        input:
            unpack(retrieval_inputs),
            cfg=task_sections,
            model=f"{RUN}/model",
            dev=f"{R}/data/{{task}}/dev.jsonl",
            test=f"{R}/data/{{task}}/test.jsonl",
        output:
            **EVAL_OUTPUTS,
        params:
            retrieval=lambda w, input: retrieval_args(w, input),
            record=record("evaluate"),
        threads: CFG["threads"]
        resources:
            runtime=res("evaluate", "runtime", 60),
            mem_mb=res("evaluate", "mem_mb", 4000),
            gpu=res("evaluate", "gpu", 0),
        log:
            f"{R}/logs/evaluate/{{task}}-{{variant}}-seed{{seed}}.log",
        conda:
            CONDA
        shell:
            "RAG_THREADS={threads} rag --record {params.record} evaluate --seed {wildcards.seed} --config {input.cfg} --variant {wildcards.variant} "
            "--model-dir {input.model} {params.retrieval} --dev {input.dev} --test {input.test} "
            "--dev-predictions {output.dev_predictions} --dev-metrics {output.dev_metrics} "
            "--test-predictions {output.test_predictions} --test-metrics {output.test_metrics} 2> {log}"


rule topk_sweep:
    input:
        unpack(retrieval_inputs),
        cfg=task_sections,
        exp=section("experiments"),
        model=f"{RUN}/model",
        test=f"{R}/data/{{task}}/test.jsonl",
    output:
        f"{R}/experiments/topk/{{task}}/{{variant}}/seed{{seed}}.json",
    params:
        retrieval=lambda w, input: retrieval_args(w, input),
        record=record("topk_sweep"),
    priority: EXPERIMENT_PRIORITY
    threads: CFG["threads"]
    log:
        f"{R}/logs/topk/{{task}}-{{variant}}-seed{{seed}}.log",
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads} rag --record {params.record} topk-sweep --seed {wildcards.seed} --config {input.cfg} --experiments-config {input.exp} "
        "--variant {wildcards.variant} --test {input.test} --model-dir {input.model} "
        "{params.retrieval} --out {output} 2> {log}"


rule oracle:
    input:
        cfg=task_sections,
        model=f"{RUN}/model",
        passages=corpus_passages(NAME),
        test=f"{R}/data/{{task}}/test.jsonl",
    output:
        f"{R}/experiments/oracle/{{task}}/{{variant}}/seed{{seed}}.json",
    priority: EXPERIMENT_PRIORITY
    threads: CFG["threads"]
    log:
        f"{R}/logs/oracle/{{task}}-{{variant}}-seed{{seed}}.log",
    params:
        record=record("oracle"),
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads} rag --record {params.record} oracle --seed {wildcards.seed} --config {input.cfg} --variant {wildcards.variant} --model-dir {input.model} "
        "--passages {input.passages} --test {input.test} --out {output} 2> {log}"


rule hotswap:
    input:
        cfg=[section("train_nq"), section("eval_nq")],
        model=f"{R}/runs/nq/{{variant}}/seed{{seed}}/model",
        questions=f"{R}/data/hotswap/questions.jsonl",
        passages_a=corpus_passages(NAME),
        emb_a=shard_files(NAME),
        index_a=index_file(NAME),
        passages_b=corpus_passages(f"{NAME}_b"),
        emb_b=shard_files(f"{NAME}_b"),
        index_b=index_file(f"{NAME}_b"),
    output:
        f"{R}/experiments/hotswap/{{variant}}/seed{{seed}}.json",
    priority: EXPERIMENT_PRIORITY
    threads: CFG["threads"]
    log:
        f"{R}/logs/hotswap/{{variant}}-seed{{seed}}.log",
    params:
        record=record("hotswap"),
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads} rag --record {params.record} hotswap --seed {wildcards.seed} --config {input.cfg} --variant {wildcards.variant} "
        "--model-dir {input.model} --questions {input.questions} "
        "--passages-a {input.passages_a} --embeddings-a {input.emb_a} --index-a {input.index_a} "
        "--passages-b {input.passages_b} --embeddings-b {input.emb_b} --index-b {input.index_b} --out {output} 2> {log}"
