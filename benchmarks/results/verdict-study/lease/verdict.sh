#!/bin/bash
# A verdict command (LEASES.md; benchmarks/studies/verdict_sizing.py picks them): `verdict.sh N K [jsa|rws|jsa-trunk|jsa-arms]`
# trains the K-th group of N seeds (K = 0, 1, ...): JSA's trunk to the branch epoch, then its three arms from the trunk's own
# checkpoint, and RWS, as replicated processes (JSA's and RWS's side by side, --lanes 2; `jsa` or `rws`: only those;
# `jsa-trunk`: the trunks only, their checkpoints returned in $OUT as gzipped parts <process>.ckpt.gz.NN, to commit
# under benchmarks/results/verdict-study/trunks/; `jsa-arms`: the arms, from the trunk's folder on this warm machine or
# from those committed parts), each run's record written as it finishes; then, on this machine where their checkpoints
# lie, the 20,000-sample measure of the runs it finished (--is-resolution) and, where PLAN.md's amendment has fixed the
# refit's steps (REFIT_STEPS=...), the refit-q check; then the report. Records, measures and report come back in $OUT
# as results.tgz, to unpack into benchmarks/results/verdict-study and commit. Within CALL_LIMIT (the call's
# timeout_s, default 600) less 10 s: training until CALL_LIMIT - 130 s, the measures until CALL_LIMIT - 40 s. Run again
# on the same warm machine (CALL_LIMIT=<its timeout_s>), it resumes a process cut by the limit from its last validation
# (the logs stay in the git-ignored .verdict-run/, which no call carries).
. "$(dirname "$0")/setup.sh"
USE="verdict.sh N K [jsa|rws|jsa-trunk|jsa-arms]: the K-th group of N seeds"
SIZE=${1:?$USE} GROUP=${2:?$USE}
JSA_ARMS="--arms jsa-never,jsa-cache300,jsa-cache300-rho0.2"
case "${3:-both}" in
    both) ARMS="" ;;
    jsa|jsa-arms) ARMS=$JSA_ARMS ;;
    jsa-trunk) ARMS="$JSA_ARMS --trunks-only" ;;
    rws) ARMS="--arms rws" ;;
    *) echo "$USE; the third argument is jsa, rws, jsa-trunk, jsa-arms or none (both), got $3" >&2; exit 2 ;;
esac
if [ -n "$TOY" ]; then  # 2 seeds; a branch epoch of 2 of 4; 3 batches of 8 an epoch, 2 samples; a 3-step refit
    STUDY="--seeds 2 --branch-epoch 2 --epochs 4 --val-every 1 --val-samples 2 --steps-per-epoch 3"
    MEASURES="--is-device cpu --is-images 16 --is-samples 2,4"
    TRAIN="trainer.limit_train_batches=3 trainer.limit_val_batches=1 trainer.limit_test_batches=1 data.batch_size=8 data.eval_batch_size=8 model.test_num_samples=2"
    REFIT_STEPS=3 REFIT="--refit-samples 4" TRAIN_LIMIT=1200 MEASURE_END=1800
    COMPILE=""  # eager: inductor on 2 cores takes minutes a process (lease 1's toy table compiles the replicated step)
else  # the pre-registered study (PLAN.md): 5 seeds, branch at 300, 500 epochs, validation at 1000 samples
    STUDY="--seeds 5" MEASURES="--is-device cuda" TRAIN="" REFIT=""
    CALL_LIMIT=${CALL_LIMIT:-600} COMPILE="model.compile=step"
    TRAIN_LIMIT=$((CALL_LIMIT - 130)) MEASURE_END=$((CALL_LIMIT - 40))
fi
STUDY="$STUDY --replicas-per-process $SIZE --logs .verdict-run/logs"
ONLY=$(python3 -c "import sys; n, k = map(int, sys.argv[1:]); print(','.join(f'*-s{s},*-s{s}-*' for s in range(n * k, n * k + n)))" "$SIZE" "$GROUP")
if [ "$3" = jsa-arms ]; then  # the arms start from their trunks, trained and committed by `verdict.sh N K jsa-trunk`
    for s in $(seq $((SIZE * GROUP)) $((SIZE * GROUP + SIZE - 1))); do
        ls benchmarks/results/verdict-study/runs/jsa-never-s$s-to*.json > /dev/null 2>&1 ||
            { echo "verdict.sh $SIZE $GROUP jsa-arms: seed $s's trunk has no record; run verdict.sh $SIZE $GROUP jsa-trunk first" | tee -a "$LOG" >&2; exit 2; }
    done
fi
step "verdict-$SIZE-$GROUP-${3:-both}" "$TRAIN_LIMIT" python3 -m benchmarks.studies.verdict_study $STUDY $ARMS --lanes 2 --only "$ONLY" $COMPILE $TRAIN
[ "$3" = jsa-trunk ] && MEASURE_END=0  # nothing to measure: a trunk's runs go on in their arms
[ $((MEASURE_END - SECONDS)) -gt 20 ] &&
    step is-resolution $((MEASURE_END - SECONDS)) python3 -m benchmarks.studies.verdict_study $STUDY $MEASURES --is-resolution
[ -n "$REFIT_STEPS" ] && [ $((MEASURE_END - SECONDS)) -gt 20 ] &&
    step refit-q $((MEASURE_END - SECONDS)) python3 -m benchmarks.studies.verdict_study $STUDY $MEASURES $REFIT --refit-steps "$REFIT_STEPS" --refit-q
python3 -m benchmarks.studies.verdict_study $STUDY --report-only >> "$LOG" 2>&1
[ "$3" = jsa-trunk ] && python3 -m benchmarks.studies.verdict_study $STUDY $ARMS --only "$ONLY" --pack-trunks "$OUT" >> "$LOG" 2>&1
tail -n 5 .verdict-run/logs/processes/*/train.log > "$OUT/processes.log" 2>&1
cd benchmarks/results/verdict-study && tar -czf "$OUT/results.tgz" runs report.md commands.txt $(ls verdict_curves.png is-resolution.json refit-q.json 2>/dev/null)
