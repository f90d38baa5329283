# Evaluation of every model on dev and test; the experiments of the topk task's models (Figure 3's
# test-time K sweep, the oracle and the index hot-swap). Jobs that load a task's model read its train_<task> and eval_<task> sections.


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
            record=record_file("evaluate", "task", "variant", "seed"),
            **QUESTION_ENCODER,
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
            "RAG_THREADS={threads:q} rag-record --out {params.record:q} -- rag evaluate --seed {wildcards.seed:q} --config {input.cfg:q} --variant {wildcards.variant:q} "
            "--model-dir {input.model:q} {params.retrieval:q} --dev {input.dev:q} --test {input.test:q} "
            "--dev-predictions {output.dev_predictions:q} --dev-metrics {output.dev_metrics:q} "
            "--test-predictions {output.test_predictions:q} --test-metrics {output.test_metrics:q} 2> {log:q}"


rule experiments:
    # one job per model of the topk task's RAG runs: Figure 3's K sweep and, where they run, the reader
    # given the gold passage (experiments.oracle) and the index hot-swap (experiments.hotswap)
    input:
        unpack(retrieval_inputs),
        unpack(hotswap_inputs),
        cfg=task_sections,
        exp=section("experiments"),
        model=f"{RUN}/model",
        test=f"{R}/data/{{task}}/test.jsonl",
        test_predictions=f"{RUN}/test/predictions.jsonl",
    output:
        **EXPERIMENT_OUTPUTS,
    params:
        retrieval=lambda w, input: retrieval_args(w, input),
        experiments=experiment_args,
        **METRIC_FILES,
        record=record_file("experiments", "task", "variant", "seed"),
        **QUESTION_ENCODER,
    threads: CFG["threads"]
    log:
        f"{R}/logs/experiments/{{task}}-{{variant}}-seed{{seed}}.log",
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads:q} rag-record --out {params.record:q} -- rag experiments --seed {wildcards.seed:q} --config {input.cfg:q} --experiments-config {input.exp:q} "
        "--variant {wildcards.variant:q} --test {input.test:q} --test-predictions {input.test_predictions:q} --model-dir {input.model:q} "
        "{params.retrieval:q} {params.experiments:q} 2> {log:q}"
