#!/usr/bin/env bash
# Tuning studies under strict on a lent GPU machine (16 cores, one NVIDIA GPU, PyTorch with
# CUDA, no internet), beside the CUDA tests: the studies too slow for a 2-core CPU machine
# (FedRecGEL's NeuMF tower: ~16 s a round on Last.fm-2K on one core, ~1 s on an H200) run
# with --device cuda; others use the machine's spare cores with --device cpu. Every study
# stops starting trials after $STOP seconds and reports the trials it completed. Run from
# the repository root:
#
#   OUT=/tmp/tuning STOP=270 bash bench/gpu_tuning.sh
#
# Needs .whl/ (flwr, optuna and what they need that the machine lacks) and .data/
# (ml-100k/u.data, lastfm-2k/user_taggedartists.dat). Writes $OUT/tuning.tgz (the studies'
# journals, reports and logs: the device tool returns at most 8 files a call, so they travel
# as one) and $OUT/pytest-cuda.log. STUDIES="stem:device:jobs[:patience[:plugin]] ..." picks
# the studies (patience: early-stopping-patience, default 20, 0 for Last.fm-2K's early
# validation peak; plugin: tune only the plug-in's knobs, --plugin-only).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-tuning}
STOP=${STOP:-270}
HARD=${HARD:-480}
mkdir -p "$OUT/tuning-strict"
GPU_MODULES=optuna
source bench/gpu_env.sh

timeout 200 python3 -m pytest tests/apps/test_cuda.py -q -p no:cacheprovider > "$OUT/pytest-cuda.log" 2>&1 &

study() {  # study <preset stem> <device> <jobs> <patience> [plugin]
    timeout "$HARD" python3 -m fedrec_lab.tuning "conf/$1.toml" --data-dir .data --trials 16 \
        --rounds 100 --patience "$4" --device "$2" --jobs "$3" --timeout "$STOP" \
        ${5:+--plugin-only} --out "$OUT/tuning-strict" > "$OUT/$1.log" 2>&1
    echo "$1: exit $? after $SECONDS s"
}
STUDIES=${STUDIES:-"fedrecgel-lastfm2k-strict:cuda:5 fedrecgel-ml100k-strict:cuda:4
    fedrap-plgc-ml100k-strict:cpu:3 fedncf-ml100k-strict:cpu:3"}
for entry in $STUDIES; do
    IFS=: read -r stem device jobs patience plugin <<< "$entry"
    study "$stem" "$device" "$jobs" "${patience:-20}" $plugin &
done
wait
tail -3 "$OUT/pytest-cuda.log"
for f in "$OUT"/tuning-strict/*.md; do sed -n '5p;9,12p' "$f"; done
mv "$OUT"/*-strict.log "$OUT/tuning-strict/" 2>/dev/null
tar czf "$OUT/tuning.tgz" -C "$OUT" tuning-strict && rm -rf "$OUT/tuning-strict"
