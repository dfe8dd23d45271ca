#!/usr/bin/env bash
# GPU checks, as one script for a lent GPU machine (16 cores, one NVIDIA GPU, PyTorch with
# CUDA, no internet, no Ray): the CUDA tests, then the scale harness with CPU and GPU cases
# side by side in one run. Run from the repository root:
#
#   OUT=/tmp/gpu bash bench/gpu_checks.sh [quick | lean]
#
# Optional folders: .whl/ (wheels of flwr and what it needs that the machine lacks,
# installed into /tmp/site) and .data/ (ml-100k/u.data, lastfm-2k/user_taggedartists.dat).
# Writes pytest-cuda.log, scale-*.json and a tarball of bench/results/scale to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
source bench/gpu_env.sh

timeout 300 python3 -m pytest tests/test_cuda.py -q -p no:cacheprovider -x 2>&1 | tee "$OUT/pytest-cuda.log" | tail -15

RESULTS=bench/results/scale
ML1M="dataset=synthetic,users=6040,items=3706,degree=165,mode=inprocess"
BIG="dataset=synthetic,users=100000,items=20000,degree=50,mode=inprocess,fraction-train=0.1,eval-users=1000"
ML100K="preset=pfedrec-ml100k-strict,mode=inprocess"
if [ "${1:-}" = quick ]; then
    python3 bench/scale.py --rounds 3 --no-floor --case "$ML1M,device=cuda" 2>&1 | tail -3
elif [ "${1:-}" = lean ]; then  # the fewest cases that compare CPU and GPU
    python3 bench/scale.py --rounds 4 --no-floor --data-dir .data \
        --case "$ML1M" --case "$ML100K" > "$OUT/scale-cpu.log" 2>&1 &
    cpu=$!
    python3 bench/scale.py --rounds 4 --no-floor --data-dir .data --case "$ML1M,device=cuda" \
        --case "$BIG,device=cuda" --case "$ML100K,device=cuda" > "$OUT/scale-gpu.log" 2>&1
    wait $cpu
    tail -4 "$OUT/scale-cpu.log" "$OUT/scale-gpu.log"
else
    # CPU and GPU cases run at the same time on different cores (the GPU case's process
    # drives the GPU from one core); each case's process runs with torch-threads 1.
    python3 bench/scale.py --rounds 4 --no-floor --data-dir .data \
        --case "$ML100K" --case "$ML1M" --case "$BIG" > "$OUT/scale-cpu.log" 2>&1 &
    cpu=$!
    python3 bench/scale.py --rounds 4 --no-floor --data-dir .data \
        --case "$ML100K,device=cuda" --case "$ML1M,device=cuda" \
        --case "$ML1M,device=cuda,cuda-deterministic=false" --case "$BIG,device=cuda" \
        > "$OUT/scale-gpu.log" 2>&1
    wait $cpu
    tail -4 "$OUT/scale-cpu.log" "$OUT/scale-gpu.log"
fi
cat "$RESULTS/table.md" 2>/dev/null
tar czf "$OUT/scale-results.tgz" "$RESULTS" 2>/dev/null
