# Set-up jobs that run before the pipeline proper: config sections and the tracking store.


rule config_section:
    """Write one resolved config section; its content is a param, so a change re-runs dependents
    (and an unchanged section is not rewritten: its job does not run)."""
    input:
        check_sections,
    output:
        f"{R}/config/{{section}}.json",
    params:
        value=lambda w: SECTIONS[w.section],
    log:
        f"{R}/logs/config/{{section}}.log",
    localrule: True
    run:
        from rag.io import write_json

        write_json(output[0], params.value)


rule init_store:
    """Create the MLflow store once, before parallel jobs write to it (the store may be shared by
    several experiments: creating it again is harmless, so each experiment has its own marker)."""
    output:
        f"{R}/mlflow.ready",
    params:
        uri=lambda w: CFG["tracking"]["uri"],  # a function: not formatted with wildcards
        record=record_file("init_store"),
    log:
        f"{R}/logs/init_store.log",
    localrule: True
    conda:
        CONDA
    shell:
        "rag-record --out {params.record:q} -- rag init-store --uri {params.uri:q} --marker {output:q} 2> {log:q}"
