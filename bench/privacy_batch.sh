#!/usr/bin/env bash
# The privacy audit's runs in one batch, on a 16-core machine without Flower:
# the plain round loop (fedrec_lab/audit/loop.py) on prepared ML-100K splits copied to
# $PREPARED/{strict,paper} (from $FEDREC_CACHE_DIR/prepared), results under $OUT.
#   OUT=out PREPARED=results/privacy-carry bash bench/privacy_batch.sh
set -u
export PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
P=${PREPARED:-results/privacy-carry}
LIMIT=${LIMIT:-540}
A="python -m fedrec_lab.audit.command --nodes 0 --users 100 --audit-rounds 1 50 100 --rounds 100"
S="$A --prepared $P/strict --out $OUT --seeds 0 --methods pfedrec fedmf"
run() { timeout "$LIMIT" "$@"; }
# the table: none / ldp / decoys / both, 3 seeds (seed-major: seed 0 finishes first)
run $A --prepared $P/strict --out $OUT --tag audit-ml100k --methods pfedrec fedmf \
    --seeds 0 1 2 --jobs 10 > "$OUT/audit.log" 2>&1 &
# PFedRec Table 4 under the paper protocol
run $A --prepared $P/paper --out $OUT --tag table4-paper --protocol paper --methods pfedrec \
    --lambdas 0 0.1 0.2 0.3 0.4 0.5 --seeds 0 --jobs 3 > "$OUT/table4-paper.log" 2>&1 &
# the trade-off around the table's settings (seed 0)
(
    run $S --tag sweep-eps2 --configs ldp --ldp ldp-epsilon=2.0 --name eps2 --jobs 2 &
    run $S --tag sweep-decoys4 --configs decoys --decoys decoy-ratio=4.0 --name r4 --jobs 1
    wait
    run $S --tag sweep-eps8 --configs ldp --ldp ldp-epsilon=8.0 --name eps8 --jobs 2
) > "$OUT/sweeps.log" 2>&1 &
wait
tail -n 3 "$OUT"/*.log
