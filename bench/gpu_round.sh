#!/usr/bin/env bash
# A round on CPU and CUDA side by side, as one script for a lent GPU machine (16 cores, one
# NVIDIA GPU, PyTorch with CUDA, no internet, no Ray). Run from the repository root:
#
#   OUT=/tmp/gpu bash bench/gpu_round.sh [quick]
#
# 1. The counter generator's tests, CUDA included (CPU==CUDA words and negatives).
# 2. The scale harness, 4 rounds each, CPU and CUDA processes at the same time: 100,000
#    synthetic users at 10 % per round and the ML-1M shape, each with both negative
#    samplers; JSON per case under bench/results/scale-gpu/.
# 3. The phase profile of one CUDA round (torch.profiler: operators and CUDA kernels) of the
#    100k-user case with the counter sampler: bench/results/scale-gpu/profile-cuda.json.
# quick: only the ML-1M shape, counter sampler, 3 rounds, no profile.
# Optional folders as for bench/gpu_checks.sh (.whl/, .data/). Copies the results to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-round}
mkdir -p "$OUT"
source bench/gpu_env.sh

timeout 240 python3 -m pytest tests/node/test_counter_rng.py -q -p no:cacheprovider -rs 2>&1 \
    | tee "$OUT/pytest-counter-rng.log" | tail -5

RESULTS=bench/results/scale-gpu
ML1M="dataset=synthetic,users=6040,items=3706,degree=165,mode=inprocess"
BIG="dataset=synthetic,users=100000,items=20000,degree=50,mode=inprocess,fraction-train=0.1,eval-users=1000"
if [ "${1:-}" = quick ]; then
    python3 bench/scale.py --rounds 3 --no-floor --out "$RESULTS" \
        --case "$ML1M,device=cuda,negative-sampler=counter,name=ml1m-cuda-counter" 2>&1 | tail -3
else
    cpu_cases=() gpu_cases=()
    for sampler in keyed-numpy counter; do
        for shape in ML1M BIG; do
            case_text="${!shape},negative-sampler=$sampler"
            tag=$(echo "$shape" | tr '[:upper:]' '[:lower:]')
            cpu_cases+=(--case "$case_text,name=$tag-cpu-$sampler")
            gpu_cases+=(--case "$case_text,device=cuda,name=$tag-cuda-$sampler")
        done
    done
    python3 bench/scale.py --rounds 4 --no-floor --out "$RESULTS" "${cpu_cases[@]}" \
        > "$OUT/scale-cpu.log" 2>&1 &
    cpu=$!
    python3 bench/scale.py --rounds 4 --no-floor --out "$RESULTS" "${gpu_cases[@]}" \
        > "$OUT/scale-gpu.log" 2>&1
    timeout 300 python3 bench/profile_round.py --case big --rounds 3 --sampler counter \
        --set device=cuda --ops --out "$RESULTS/profile-cuda.json" > "$OUT/profile-cuda.log" 2>&1
    wait $cpu
    tail -4 "$OUT/scale-cpu.log" "$OUT/scale-gpu.log" "$OUT/profile-cuda.log"
fi
cat "$RESULTS/table.md" 2>/dev/null
cp -r "$RESULTS" "$OUT/" 2>/dev/null
