#!/usr/bin/env bash
# Stage what the GPU pipeline check needs from a finished default run, small enough to travel to a
# GPU machine (about 9 MB): the pretrained generator, the passages, the BM25 index, NQ's data and the
# config sections. RAG-Token over BM25 is the variant checked: the dense variants need the MiniLM
# package (88 MB), over the 64 MiB a device call carries.
# usage: benchmarks/gpu_check/stage.sh results/miniworld DEST
set -euo pipefail
r=${1:?results folder of a finished default run}; d=${2:?destination folder}
mkdir -p "$d/corpus" "$d/data" "$d/config"
cp -r "$r/generator/model" "$d/generator"
cp "$r/corpus/miniworld/passages.tsv" "$d/corpus/"
cp -r "$r/index/miniworld/bm25" "$d/bm25"
cp "$r"/data/nq/{train,dev,test}.jsonl "$d/data/"
cp "$r"/config/{train_nq,eval_nq}.json "$d/config/"
du -sh "$d"
