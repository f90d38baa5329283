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
            **METRIC_FILES,
        threads: CFG["threads"]
        resources:
            runtime=res("evaluate", "runtime", 60),
            mem_mb=res("evaluate", "mem_mb", 4000),
            gpu=res("evaluate", "gpu", 0),
        benchmark:
            benchmark_file("evaluate", "task", "variant", "seed"),
        log:
            f"{R}/logs/evaluate/{{task}}-{{variant}}-seed{{seed}}.log",
        conda:
            CONDA
        shell:
            "RAG_THREADS={threads:q} rag evaluate --seed {wildcards.seed:q} --config {input.cfg:q} --variant {wildcards.variant:q} "
            "--model-dir {input.model:q} {params.retrieval:q} --dev {input.dev:q} --test {input.test:q} "
            "--dev-predictions {output.dev_predictions:q} --dev-metrics {output.dev_metrics:q} "
            "--test-predictions {output.test_predictions:q} --test-metrics {output.test_metrics:q} 2> {log:q}"


rule topk_sweep:
    input:
        unpack(retrieval_inputs),
        cfg=task_sections,
        exp=section("experiments"),
        model=f"{RUN}/model",
        test=f"{R}/data/{{task}}/test.jsonl",
        test_predictions=f"{RUN}/test/predictions.jsonl",
    output:
        f"{R}/experiments/topk/{{task}}/{{variant}}/seed{{seed}}.json",
    params:
        retrieval=lambda w, input: retrieval_args(w, input),
        **METRIC_FILES,
    threads: CFG["threads"]
    benchmark:
        benchmark_file("topk_sweep", "task", "variant", "seed"),
    log:
        f"{R}/logs/topk/{{task}}-{{variant}}-seed{{seed}}.log",
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads:q} rag topk-sweep --seed {wildcards.seed:q} --config {input.cfg:q} --experiments-config {input.exp:q} "
        "--variant {wildcards.variant:q} --test {input.test:q} --test-predictions {input.test_predictions:q} --model-dir {input.model:q} "
        "{params.retrieval:q} --out {output:q} 2> {log:q}"


rule oracle:
    input:
        cfg=task_sections,
        model=f"{RUN}/model",
        passages=corpus_passages(NAME),
        passage_rows=passage_rows(NAME),
        test=f"{R}/data/{{task}}/test.jsonl",
    output:
        f"{R}/experiments/oracle/{{task}}/{{variant}}/seed{{seed}}.json",
    threads: CFG["threads"]
    benchmark:
        benchmark_file("oracle", "task", "variant", "seed"),
    log:
        f"{R}/logs/oracle/{{task}}-{{variant}}-seed{{seed}}.log",
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads:q} rag oracle --seed {wildcards.seed:q} --config {input.cfg:q} --variant {wildcards.variant:q} --model-dir {input.model:q} "
        "--passages {input.passages:q} --test {input.test:q} --out {output:q} 2> {log:q}"


rule hotswap:
    input:
        cfg=[section(f"train_{HOTSWAP_TASK}"), section(f"eval_{HOTSWAP_TASK}")],
        model=f"{R}/runs/{HOTSWAP_TASK}/{{variant}}/seed{{seed}}/model",
        questions=f"{R}/data/hotswap/questions.jsonl",
        passages_a=corpus_passages(NAME),
        rows_a=passage_rows(NAME),
        emb_a=shard_files(NAME),
        index_a=index_file(NAME),
        passages_b=corpus_passages(f"{NAME}_b"),
        rows_b=passage_rows(f"{NAME}_b"),
        emb_b=shard_files(f"{NAME}_b"),
        index_b=index_file(f"{NAME}_b"),
    output:
        f"{R}/experiments/hotswap/{{variant}}/seed{{seed}}.json",
    threads: CFG["threads"]
    benchmark:
        benchmark_file("hotswap", "variant", "seed"),
    log:
        f"{R}/logs/hotswap/{{variant}}-seed{{seed}}.log",
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads:q} rag hotswap --seed {wildcards.seed:q} --config {input.cfg:q} --variant {wildcards.variant:q} "
        "--model-dir {input.model:q} --questions {input.questions:q} "
        "--passages-a {input.passages_a:q} --embeddings-a {input.emb_a:q} --index-a {input.index_a:q} "
        "--passages-b {input.passages_b:q} --embeddings-b {input.emb_b:q} --index-b {input.index_b:q} --out {output:q} 2> {log:q}"
