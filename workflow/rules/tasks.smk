# Task data: train/dev/test jsonl per task ({id, input, targets, meta}), generated (miniworld) or
# converted from the downloaded / local files with the task's parser (rag/data/formats.py).
MINIWORLD_TASKS = sorted(t for t, s in CFG["tasks"].items() if s["source"] == "miniworld")
FILE_TASKS = sorted(t for t, s in CFG["tasks"].items() if s["source"] != "miniworld")


if MINIWORLD_TASKS:

    rule task_data:
        input:
            cfg=lambda w: section(f"data_{w.task}"),
        output:
            train=f"{R}/data/{{task}}/train.jsonl",
            dev=f"{R}/data/{{task}}/dev.jsonl",
            test=f"{R}/data/{{task}}/test.jsonl",
        wildcard_constraints:
            task="|".join(MINIWORLD_TASKS),
        params:
            record=record_file("task_data", "task"),
        log:
            f"{R}/logs/tasks/{{task}}.log",
        conda:
            CONDA
        shell:
            "rag-record --out {params.record:q} -- rag tasks --config {input.cfg:q} --out-train {output.train:q} --out-dev {output.dev:q} --out-test {output.test:q} 2> {log:q}"


if FILE_TASKS:

    rule task_files:
        input:
            unpack(lambda w: TASK_SOURCES[w.task]),
            cfg=lambda w: section(f"data_{w.task}"),
        output:
            train=f"{R}/data/{{task}}/train.jsonl",
            dev=f"{R}/data/{{task}}/dev.jsonl",
            test=f"{R}/data/{{task}}/test.jsonl",
        wildcard_constraints:
            task="|".join(FILE_TASKS),
        resources:
            runtime=res("task_data", "runtime", 60),
            mem_mb=res("task_data", "mem_mb", 4000),
        log:
            f"{R}/logs/tasks/{{task}}.log",
        params:
            record=record_file("task_files", "task"),
            # local task files and a parser file of the user's: their sha256 (common.smk LOCAL_SHA256), so other content re-runs the job
            **({"source_sha256": lambda w: {k: sha for k, sha in local_sha256(f"tasks.{w.task}").items() if ".metrics." not in k}}
               if local_sha256("tasks") else {}),
        conda:
            CONDA
        shell:
            "rag-record --out {params.record:q} -- rag tasks --config {input.cfg:q} --in-train {input.src_train:q} --in-dev {input.src_dev:q} --in-test {input.src_test:q} "
            "--out-train {output.train:q} --out-dev {output.dev:q} --out-test {output.test:q} 2> {log:q}"


rule hotswap_data:
    input:
        cfg=section("corpus"),
    output:
        f"{R}/data/hotswap/questions.jsonl",
    params:
        record=record_file("hotswap_data"),
    log:
        f"{R}/logs/tasks/hotswap.log",
    conda:
        CONDA
    shell:
        "rag-record --out {params.record:q} -- rag hotswap-data --config {input.cfg:q} --out {output:q} 2> {log:q}"
