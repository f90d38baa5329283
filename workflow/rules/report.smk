# The HTML report: the paper's tables and figures, measured beside published. It reads exactly
# the files listed as its inputs (report_inputs in common.smk): this experiment's runs, no other.


rule report:
    input:
        unpack(report_inputs),
        cfg=section("report"),
        passages=corpus_passages(NAME),
    output:
        html=report(f"reports/{EXP}/report.html", caption="../report/report.rst", category="Report"),
        table1=f"{R}/tables/table1.csv",
        table2=f"{R}/tables/table2.csv",
        table5=f"{R}/tables/table5.csv",
        table6=f"{R}/tables/table6.csv",
    params:
        url=lambda w: CFG["tracking"]["ui_url"],  # a function: not formatted with wildcards
        samples=CFG["report"]["samples_per_task"],
        train_data=train_data_args,
        bands=bands_args,
        **METRIC_FILES,
        record=record_file("report"),
    log:
        f"{R}/logs/report.log",
    conda:
        CONDA
    shell:
        "rag-record --out {params.record:q} -- rag report --metrics {input.metrics:q} --predictions {input.predictions:q} --topk {input.topk:q} "
        "--hotswap {input.hotswap:q} --oracle {input.oracle:q} --train-data {params.train_data:q} --passages {input.passages:q} --scale-json {input.cfg:q} "
        "--out {output.html:q} --table1 {output.table1:q} --table2 {output.table2:q} --table5 {output.table5:q} "
        "--table6 {output.table6:q} --tracking-url {params.url:q} --samples-per-task {params.samples:q} {params.bands:q} 2> {log:q}"


if CFG["generators"]:  # config key generators: {} leaves the experiment without a generators target

    use rule report as report_generators with:
        input:
            unpack(lambda w: report_inputs(w, generators=True)),
            cfg=section("report"),
            passages=corpus_passages(NAME),
        output:
            html=f"reports/{EXP}/generators.html",
            table1=f"{R}/tables/generators/table1.csv",
            table2=f"{R}/tables/generators/table2.csv",
            table5=f"{R}/tables/generators/table5.csv",
            table6=f"{R}/tables/generators/table6.csv",
        params:
            record=record_file("report_generators"),
        log:
            f"{R}/logs/report_generators.log",

    rule generators:
        """`snakemake --cores all generators`: the further generators of config key generators, pretrained
        and fine-tuned beside generator's runs, and the report that sets them side by side."""
        input:
            f"reports/{EXP}/generators.html",



if RETRIEVER_RUNS:  # no runs of config key retrievers with target retrievers: no retrievers target

    use rule report as report_retrievers with:
        input:
            unpack(lambda w: report_inputs(w, retrievers=True)),
            cfg=section("report"),
            passages=corpus_passages(NAME),
        output:
            html=f"reports/{EXP}/retrievers.html",
            table1=f"{R}/tables/retrievers/table1.csv",
            table2=f"{R}/tables/retrievers/table2.csv",
            table5=f"{R}/tables/retrievers/table5.csv",
            table6=f"{R}/tables/retrievers/table6.csv",
        params:
            record=record_file("report_retrievers"),
        log:
            f"{R}/logs/report_retrievers.log",

    rule retrievers:
        """`snakemake --cores all retrievers`: the further retrievers of config key retrievers, each run with
        its variants beside their own retriever's runs, and the report that sets them side by side."""
        input:
            f"reports/{EXP}/retrievers.html",

if END2END_RUNS:  # no retriever of config key retrievers with target end2end: no end2end target

    use rule report as report_end2end with:
        input:
            unpack(lambda w: report_inputs(w, end2end=True)),
            cfg=section("report"),
            passages=corpus_passages(NAME),
        output:
            html=f"reports/{EXP}/end2end.html",
            table1=f"{R}/tables/end2end/table1.csv",
            table2=f"{R}/tables/end2end/table2.csv",
            table5=f"{R}/tables/end2end/table5.csv",
            table6=f"{R}/tables/end2end/table6.csv",
        params:
            record=record_file("report_end2end"),
        log:
            f"{R}/logs/report_end2end.log",

    rule end2end:
        """`snakemake --cores all end2end`: the retrievers trained end to end (config key retrievers, target
        end2end) beside the question encoder trained alone and the frozen retriever, and the report with their
        index refresh strategies, objectives and claims rows."""
        input:
            f"reports/{EXP}/end2end.html",

if BANDS:  # config key bands: null leaves the experiment without a check target

    rule check:
        """`snakemake --cores all check`: the experiment's scores against its score bands (config key
        bands), OK / FAIL per cell; fails (and writes nothing) when a cell is out of band."""
        input:
            bands=BANDS,
            cfg=section("report"),
            metrics=run_files("metrics.json"),
            predictions=run_files("predictions.jsonl"),
        output:
            f"{R}/check.txt",
        params:
            seed=CFG["seed"],
        log:
            f"{R}/logs/check.log",
        localrule: True
        conda:
            CONDA
        shell:
            "rag check --bands {input.bands:q} --metrics {input.metrics:q} --predictions {input.predictions:q} --report-config {input.cfg:q} "
            "--seed {params.seed:q} --out {output:q} 2>&1 | tee {log:q}"
