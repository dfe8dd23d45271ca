#!/usr/bin/env bash
# The GPU checks and the profile of a CUDA round, as ONE prepared script for a lent GPU
# machine (16 cores, one NVIDIA GPU, PyTorch with CUDA, no internet, no Ray), run from the
# repository root in one call of at most about 8 minutes (each step has its timeout; a case
# cut short leaves the cases before it):
#
#   OUT=/tmp/gpu bash bench/gpu_checks.sh [full|probe|rerun]
#
# 1. The CPU cases of the scale harness start at once, each in a process of its own with
#    torch-threads 1, on the machine's spare cores: 100,000 users x 20,000 items (degree
#    50, 10 % a round, 1,000 evaluated), the ML-1M shape (6,040 x 3,706, degree 165, every
#    user a round) and the ML-20M shape (138,493 x 26,744, degree 144, 10 % a round), all
#    with the counter sampler.
# 2. Meanwhile the CUDA tests (tests/apps/test_cuda.py: packed against one-by-one, CPU
#    against CUDA, every method on CUDA, exact full ranks on CUDA equal to the CPU's) and
#    the counter generator's and the fast full ranking's tests.
# 3. The same three cases on CUDA, one after another (the GPU is never shared between two
#    timed cases), ROUNDS rounds each (default 4; the last evaluates every user over the
#    full catalogue).
# 4. The phase profile of the 100k-user case on CUDA, with torch.profiler (operators, CUDA
#    kernels) and cProfile (the host's side) of an intermediate round and, in a second
#    run, of the last round (which evaluates every user).
# probe: the ML-20M shape left out (a shorter call). rerun: steps 1 and 3 only, for the
# 100k-user and ML-1M cases.
# Needs only the wheels bench/gpu_env.sh installs (.whl/ or shared/tools/gpu-wheels) and the
# synthetic data the harness makes. Writes $OUT/gpu-checks.tgz (the scale JSON and table,
# the profile and every log: the device tool returns at most 8 files a call, so they travel
# as one) and $OUT/summary.log.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-checks}
MODE=${1:-full}
ROUNDS=${ROUNDS:-4}
DEADLINE=${DEADLINE:-420}  # seconds from the start: no step runs past it, the archive is kept
RESULTS=bench/results/scale-gpu
LOGS=$RESULTS/logs
mkdir -p "$OUT" "$LOGS"
source bench/gpu_env.sh > "$LOGS/machine.log" 2>&1 || { cat "$LOGS/machine.log"; exit 1; }
cat "$LOGS/machine.log"

SAMPLER="negative-sampler=counter"
ML1M="dataset=synthetic,users=6040,items=3706,degree=165,mode=inprocess,$SAMPLER"
BIG="dataset=synthetic,users=100000,items=20000,degree=50,mode=inprocess,fraction-train=0.1,eval-users=1000,$SAMPLER"
ML20M="dataset=synthetic,users=138493,items=26744,degree=144,mode=inprocess,fraction-train=0.1,eval-users=1000,$SAMPLER"

left() {  # left <seconds>: the smaller of the step's own limit and the time to the deadline
    local rest=$((DEADLINE - SECONDS))
    echo $(( $1 < rest ? $1 : (rest > 1 ? rest : 1) ))
}

scale() {  # scale <timeout> <name> <case>
    timeout "$(left "$1")" python3 bench/scale.py --rounds "$ROUNDS" --no-floor --no-probe \
        --out "$RESULTS" --case "$3,name=$2" > "$LOGS/scale-$2.log" 2>&1
    echo "scale $2: exit $?" | tee -a "$LOGS/steps.log"
}

pids=()
scale 400 big-cpu "$BIG" & pids+=($!)
scale 300 ml1m-cpu "$ML1M" & pids+=($!)
[ "$MODE" = full ] && { scale 400 ml20m-cpu "$ML20M" & pids+=($!); }
if [ "$MODE" != rerun ]; then
    timeout "$(left 80)" python3 -m pytest tests/apps/test_cuda.py tests/node/test_counter_rng.py \
        tests/node/test_full_ranking.py -q -p no:cacheprovider -rs > "$LOGS/pytest-cuda.log" 2>&1
    echo "pytest: exit $?" | tee -a "$LOGS/steps.log"
    tail -4 "$LOGS/pytest-cuda.log"
fi
scale 90 big-cuda "$BIG,device=cuda"
scale 60 ml1m-cuda "$ML1M,device=cuda"
[ "$MODE" = full ] && scale 100 ml20m-cuda "$ML20M,device=cuda"
if [ "$MODE" != rerun ]; then
    for profiled in 2 3; do
        timeout "$(left 80)" python3 bench/profile_round.py --case big --rounds 3 --sampler counter \
            --set device=cuda --ops --py --ops-round $profiled --top 25 \
            --out "$RESULTS/profile-cuda-round$profiled.json" \
            > "$LOGS/profile-cuda-round$profiled.log" 2>&1
        echo "profile round $profiled: exit $?" | tee -a "$LOGS/steps.log"
    done
fi
wait "${pids[@]}"
cat "$RESULTS/table.md" 2>/dev/null | tee "$OUT/summary.log"
tail -n 5 "$LOGS"/scale-*.log >> "$OUT/summary.log"
tar czf "$OUT/gpu-checks.tgz" "$RESULTS"
