# Corpus: generate (miniworld; snapshot b for the hot-swap experiment) or convert a downloaded
# or local file (dpr_tsv | tsv | jsonl | documents) into 100-word passages.


if CFG["corpus"]["source"] == "miniworld":

    rule corpus_miniworld:
        input:
            cfg=section("corpus"),
        output:
            passages=f"{R}/corpus/{{corpus}}/passages.tsv",
            rows=f"{R}/corpus/{{corpus}}/passages.tsv.rows.npy",
            restatements=f"{R}/corpus/{{corpus}}/restatements.jsonl",
        params:
            snapshot=lambda w: "b" if w.corpus == f"{NAME}_b" else "a",
            record=record_file("corpus_miniworld", "corpus"),
        log:
            f"{R}/logs/corpus/{{corpus}}.log",
        conda:
            CONDA
        shell:
            "rag-record --out {params.record:q} -- rag corpus --config {input.cfg:q} --snapshot {params.snapshot:q} --out {output.passages:q} "
            "--restatements {output.restatements:q} 2> {log:q}"

else:

    rule corpus_convert:
        input:
            cfg=section("corpus"),
            source=CORPUS_SOURCE,
        output:
            passages=corpus_passages(NAME),
            rows=passage_rows(NAME),
        resources:
            runtime=res("corpus_convert", "runtime", 180),
            mem_mb=res("corpus_convert", "mem_mb", 8000),
        log:
            f"{R}/logs/corpus/{NAME}.log",
        params:
            record=record_file("corpus_convert"),
            # a local corpus: its sha256 (common.smk LOCAL_SHA256), so other content re-runs the job
            **({"source_sha256": local_sha256("corpus.path")} if local_sha256("corpus.path") else {}),
        conda:
            CONDA
        shell:
            "rag-record --out {params.record:q} -- rag corpus --config {input.cfg:q} --input {input.source:q} --out {output.passages:q} 2> {log:q}"
