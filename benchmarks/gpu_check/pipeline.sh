#!/usr/bin/env bash
# Train NQ RAG-Token over BM25 (80 steps) and decode its dev/test sets with `rag train`, once per
# "PRECISION:SEED", on DEVICE, from a folder made by stage.sh. Writes per run: the dev/test metrics
# and the test predictions, into OUT.
# usage: benchmarks/gpu_check/pipeline.sh STAGED DEVICE OUT "bf16:1 fp32:1 ..."
set -u
w=${1:?staged folder}; dev=${2:?cpu or cuda}; out=${3:?output folder}; runs=${4:?PRECISION:SEED ...}
mkdir -p "$out"
for r in $runs; do
  prec=${r%%:*}; seed=${r##*:}; d=$(mktemp -d)
  python3 - "$w/config/train_nq.json" "$d/train.json" "$dev" "$prec" "$d" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["device"], c["precision"] = sys.argv[3], sys.argv[4]
c["tracking"]["uri"] = f"sqlite:///{sys.argv[5]}/mlflow.db"
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
  echo "== $dev $prec seed $seed"
  RAG_THREADS=1 python3 -m rag train --seed "$seed" \
    --config "$d/train.json" "$w/config/eval_nq.json" --variant rag_token_bm25 --train-data "$w/data/train.jsonl" \
    --generator "$w/generator" --passages "$w/corpus/passages.tsv" --bm25 "$w/bm25" --checkpoint-dir "$d/ckpt" \
    --config-hash gpu-check --out "$d/model" --dev "$w/data/dev.jsonl" --test "$w/data/test.jsonl" \
    --dev-predictions "$d/dev.jsonl" --dev-metrics "$out/dev-$dev-$prec-$seed.json" \
    --test-predictions "$out/test-pred-$dev-$prec-$seed.jsonl" --test-metrics "$out/test-$dev-$prec-$seed.json" 2>&1 \
    | grep -E "INFO rag|rror|Traceback|File " | tail -8
  rm -rf "$d"
done
