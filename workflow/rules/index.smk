# Passage encoding (scatter: one job per shard), FAISS index (gather), BM25; a rerank retriever's cross-encoder.


rule encode_shard:
    input:
        cfg=section("encode"),
        passages=f"{R}/corpus/{{corpus}}/passages.tsv",
        rows=f"{R}/corpus/{{corpus}}/passages.tsv.rows.npy",
    output:
        f"{R}/index/{{corpus}}/{ENCODER}/emb-{{shard}}.npy",
    params:
        shards=CFG["retriever"]["shards"],
        record=record_file("encode_shard", "corpus", "shard"),
        **model_sha256("retriever.context_encoder"),
    threads: 1
    resources:
        runtime=res("encode_shard", "runtime", 60),
        mem_mb=res("encode_shard", "mem_mb", 4000),
        gpu=res("encode_shard", "gpu", 0),
    log:
        f"{R}/logs/encode/{{corpus}}-{ENCODER}-{{shard}}.log",
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads:q} rag-record --out {params.record:q} -- rag encode --config {input.cfg:q} --passages {input.passages:q} "
        "--shard {wildcards.shard:q} --num-shards {params.shards:q} --out {output:q} 2> {log:q}"


rule build_index:
    input:
        cfg=section("index"),
        shards=lambda w: shard_files(w.corpus),
    output:
        index=f"{R}/index/{{corpus}}/{ENCODER}/{INDEX}.faiss",
        shards=f"{R}/index/{{corpus}}/{ENCODER}/{INDEX}.faiss.shards.json",  # rag index writes it beside the index
        stats=f"{R}/index/{{corpus}}/{ENCODER}/{INDEX}.stats.json",
    resources:
        runtime=res("build_index", "runtime", 60),
        mem_mb=res("build_index", "mem_mb", 4000),
    params:
        record=record_file("build_index", "corpus"),
    log:
        f"{R}/logs/index/{{corpus}}-{ENCODER}.log",
    conda:
        CONDA
    shell:
        "rag-record --out {params.record:q} -- rag index --config {input.cfg:q} --embeddings {input.shards:q} --out {output.index:q} --stats {output.stats:q} 2> {log:q}"


rule build_bm25:
    input:
        passages=f"{R}/corpus/{{corpus}}/passages.tsv",
    output:
        directory(f"{R}/index/{{corpus}}/bm25"),
    params:
        record=record_file("build_bm25", "corpus"),
    log:
        f"{R}/logs/index/{{corpus}}-bm25.log",
    conda:
        CONDA
    shell:
        "rag-record --out {params.record:q} -- rag bm25 --passages {input.passages:q} --out {output:q} 2> {log:q}"


rule train_reranker:
    # a declared rerank retriever's cross-encoder for one task (config key retrievers): trained on the task's
    # questions against its first stage's passages, or its model as it is (train_steps 0); with the logits of
    # its first stage's top passages for every question of the task, which the task's fine-tunes read; its section
    # reranker_<name> leaves out the options read only where the reranker retrieves (a fusion's change trains nothing)
    input:
        unpack(lambda w: retriever_inputs(CFG["retrievers"][w.retriever]["options"]["first_stage"], w.task)),
        cfg=lambda w: [section(f"train_{w.task}"), section(f"reranker_{w.retriever}")],
        data=f"{R}/data/{{task}}/train.jsonl",
        scored=expand(f"{R}/data/{{{{task}}}}/{{split}}.jsonl", split=("train", "dev", "test")),
    output:
        directory(reranker_model("{retriever}", "{task}")),
    params:
        retrieval=lambda w, input: retrieval_args(w, input),
        record=record_file("train_reranker", "retriever", "task"),
    threads: CFG["threads"]
    resources:
        runtime=res("train_reranker", "runtime", 60),
        mem_mb=res("train_reranker", "mem_mb", 4000),
        gpu=res("train_reranker", "gpu", 0),
    log:
        f"{R}/logs/train_reranker/{{retriever}}-{{task}}.log",
    conda:
        CONDA
    shell:
        "RAG_THREADS={threads:q} rag-record --out {params.record:q} -- rag train-reranker --config {input.cfg:q} "
        "--retriever {wildcards.retriever:q} --train-data {input.data:q} --score-data {input.scored:q} {params.retrieval:q} "
        "--out {output:q} 2> {log:q}"
