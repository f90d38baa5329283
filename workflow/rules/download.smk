# Downloads (resumable, SHA-256 verified, atomic: `rag download`) of the corpus and the task
# files into resources/, for the sources `download`; `local` sources name files already on disk;
# miniworld needs none. URLs come from the config as params and reach the shell quoted, as every
# value does ({x:q}; a param that is several arguments is a list, each quoted).
# (Only values and lambdas here, no functions: snakemake --lint wants those in common.smk.)
import re
from pathlib import PurePosixPath
from urllib.parse import urlsplit

CORPUS = CFG["corpus"]
HTTP_ARG = ["--allow-http"] if CORPUS["allow_http"] else []
URL_NAME = lambda url: PurePosixPath(urlsplit(url).path).name  # noqa: E731  the file name a URL is saved under
SHA_ARG = lambda sha: ["--sha256", sha] if sha else []  # noqa: E731  the schema allows 64 hex digits only

# The raw corpus file the conversion reads: downloaded, local, or none (miniworld).
CORPUS_SOURCE = {
    "download": f"resources/corpus/{NAME}/{URL_NAME(CORPUS.get('url', ''))}",
    "local": CORPUS.get("path"),
}.get(CORPUS["source"])

# (task, file name) -> (url, sha256 or None) for every file of every downloaded task
TASK_DOWNLOADS = {
    (task, URL_NAME(url)): (url, spec.get("sha256", {}).get(split))
    for task, spec in CFG["tasks"].items()
    if spec["source"] == "download"
    for split, url in spec["files"].items()
}

# task -> {"src_<split>": its raw file}: the download, or the local path (load_config has checked
# that it exists); the task rule passes each to `rag tasks --in-<split>`
TASK_SOURCES = {
    task: {
        f"src_{split}": f"resources/tasks/{task}/{URL_NAME(url)}" if spec["source"] == "download" else url
        for split, url in spec.get("files", {}).items()
    }
    for task, spec in CFG["tasks"].items()
}


if CORPUS["source"] == "download":

    rule download_corpus:
        output:
            CORPUS_SOURCE,
        params:
            url=lambda w: CORPUS["url"],  # a function: its value is not formatted with wildcards ({...} in a URL)
            sha=SHA_ARG(CORPUS.get("sha256")),
            http=HTTP_ARG,
            record=record_file("download_corpus"),
        retries: 3
        resources:
            runtime=res("download", "runtime", 240),
            mem_mb=res("download", "mem_mb", 2000),
        log:
            f"{R}/logs/download/corpus-{NAME}.log",
        conda:
            CONDA
        shell:
            "rag-record --out {params.record:q} -- rag download --url {params.url:q} --out {output:q} {params.sha:q} {params.http:q} 2> {log:q}"


if TASK_DOWNLOADS:

    rule download_task_file:
        output:
            "resources/tasks/{task}/{filename}",
        wildcard_constraints:
            task="|".join(sorted({t for t, _ in TASK_DOWNLOADS})),
            filename="|".join(sorted({re.escape(f) for _, f in TASK_DOWNLOADS})),
        params:
            url=lambda w: TASK_DOWNLOADS[(w.task, w.filename)][0],
            sha=lambda w: SHA_ARG(TASK_DOWNLOADS[(w.task, w.filename)][1]),
            http=HTTP_ARG,
            record=record_file("download_task_file", "task", "filename"),
        retries: 3
        resources:
            runtime=res("download", "runtime", 240),
            mem_mb=res("download", "mem_mb", 2000),
        log:
            f"{R}/logs/download/{{task}}-{{filename}}.log",
        conda:
            CONDA
        shell:
            "rag-record --out {params.record:q} -- rag download --url {params.url:q} --out {output:q} {params.sha:q} {params.http:q} 2> {log:q}"
