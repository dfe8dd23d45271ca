#!/usr/bin/env bash
# The GPU checks and the profile of a CUDA round, as ONE prepared script for a lent GPU
# machine (16 cores, one NVIDIA GPU, PyTorch with CUDA, no internet, no Ray), run from the
# repository root in one call of at most 8 minutes (each step has its timeout; a case cut
# short leaves the cases before it):
#
#   OUT=/tmp/gpu bash bench/gpu_checks.sh [quick]
#
# 1. The CUDA tests (tests/apps/test_cuda.py: packed against one-by-one, CPU against CUDA,
#    every method on CUDA, exact full ranks on CUDA equal to the CPU's) and the counter
#    generator's and the fast full ranking's tests.
# 2. The scale harness, 4 rounds a case (the last evaluates every user over the full
#    catalogue), CPU and CUDA processes at the same time: 100,000 users x 20,000 items
#    (degree 50, 10 % a round, 1,000 evaluated), the ML-1M shape (6,040 x 3,706, degree 165,
#    every user a round), the ML-20M shape (138,493 x 26,744, degree 144, 10 % a round; its
#    CPU rounds on the 2-core machine: bench/results/profile/round-cpu-ml20m.md), all with
#    the counter sampler; JSON per case under bench/results/scale-gpu/.
# 3. The phase profile of one CUDA round of the 100k-user case with torch.profiler
#    (operators, CUDA kernels): bench/results/scale-gpu/profile-cuda.json.
# quick: the tests and the ML-1M shape on CUDA only, 3 rounds.
# Needs only the wheels bench/gpu_env.sh installs (.whl/ or shared/tools/gpu-wheels) and the
# synthetic data the harness makes. Copies the results and logs to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
source bench/gpu_env.sh

timeout 120 python3 -m pytest tests/apps/test_cuda.py tests/node/test_counter_rng.py \
    tests/node/test_full_ranking.py -q -p no:cacheprovider -rs 2>&1 \
    | tee "$OUT/pytest-cuda.log" | tail -6

RESULTS=bench/results/scale-gpu
SAMPLER="negative-sampler=counter"
ML1M="dataset=synthetic,users=6040,items=3706,degree=165,mode=inprocess,$SAMPLER"
BIG="dataset=synthetic,users=100000,items=20000,degree=50,mode=inprocess,fraction-train=0.1,eval-users=1000,$SAMPLER"
ML20M="dataset=synthetic,users=138493,items=26744,degree=144,mode=inprocess,fraction-train=0.1,eval-users=1000,$SAMPLER"
if [ "${1:-}" = quick ]; then
    timeout 200 python3 bench/scale.py --rounds 3 --no-floor --out "$RESULTS" \
        --case "$ML1M,device=cuda,name=ml1m-cuda" 2>&1 | tail -3
else
    # Each case runs in a process of its own with torch-threads 1; the CPU cases go on the
    # spare cores while the CUDA cases drive the GPU from one core.
    timeout 340 python3 bench/scale.py --rounds 4 --no-floor --out "$RESULTS" \
        --case "$BIG,name=big-cpu" > "$OUT/scale-cpu-big.log" 2>&1 &
    big=$!
    timeout 340 python3 bench/scale.py --rounds 4 --no-floor --out "$RESULTS" \
        --case "$ML1M,name=ml1m-cpu" > "$OUT/scale-cpu-ml1m.log" 2>&1 &
    ml1m=$!
    timeout 340 python3 bench/scale.py --rounds 4 --no-floor --out "$RESULTS" \
        --case "$ML20M,name=ml20m-cpu" > "$OUT/scale-cpu-ml20m.log" 2>&1 &
    ml20m=$!
    timeout 270 python3 bench/scale.py --rounds 4 --no-floor --out "$RESULTS" \
        --case "$BIG,device=cuda,name=big-cuda" --case "$ML1M,device=cuda,name=ml1m-cuda" \
        --case "$ML20M,device=cuda,name=ml20m-cuda" > "$OUT/scale-cuda.log" 2>&1
    timeout 70 python3 bench/profile_round.py --case big --rounds 3 --sampler counter \
        --set device=cuda --ops --out "$RESULTS/profile-cuda.json" > "$OUT/profile-cuda.log" 2>&1
    wait $big $ml1m $ml20m
    tail -3 "$OUT"/scale-*.log "$OUT/profile-cuda.log"
fi
cat "$RESULTS/table.md" 2>/dev/null
cp -r "$RESULTS" "$OUT/" 2>/dev/null
