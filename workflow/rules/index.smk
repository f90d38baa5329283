# Passage encoding (scatter: one job per shard), FAISS index (gather), BM25.


rule encode_shard:
    input:
        cfg=section("encode"),
        passages=f"{R}/corpus/{{corpus}}/passages.tsv",
    output:
        f"{R}/index/{{corpus}}/{ENCODER}/emb-{{shard}}.npy",
    params:
        shards=CFG["retriever"]["shards"],
        record=record("encode_shard"),
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
        "RAG_THREADS={threads} rag --record {params.record} encode --config {input.cfg} --passages {input.passages} "
        "--shard {wildcards.shard} --num-shards {params.shards} --out {output} 2> {log}"


rule build_index:
    input:
        cfg=section("index"),
        shards=lambda w: shard_files(w.corpus),
    output:
        index=f"{R}/index/{{corpus}}/{ENCODER}/{INDEX}.faiss",
        stats=f"{R}/index/{{corpus}}/{ENCODER}/{INDEX}.stats.json",
    resources:
        runtime=res("build_index", "runtime", 60),
        mem_mb=res("build_index", "mem_mb", 4000),
    log:
        f"{R}/logs/index/{{corpus}}-{ENCODER}.log",
    params:
        record=record("build_index"),
    conda:
        CONDA
    shell:
        "rag --record {params.record} index --config {input.cfg} --embeddings {input.shards} --out {output.index} --stats {output.stats} 2> {log}"


rule build_bm25:
    input:
        passages=f"{R}/corpus/{{corpus}}/passages.tsv",
    output:
        directory(f"{R}/index/{{corpus}}/bm25"),
    log:
        f"{R}/logs/index/{{corpus}}-bm25.log",
    params:
        record=record("build_bm25"),
    conda:
        CONDA
    shell:
        "rag --record {params.record} bm25 --passages {input.passages} --out {output} 2> {log}"
