#!/bin/bash
# Lease 2 (LEASES.md): the study's training process as train.py runs it, timed and checked for determinism, before any
# verdict lease is sized. First, whether model.compile=step computes on the GPU what the eager step computes (JSA and
# RWS, one run and two replicas: compiled_equals_eager.txt). Then the runs, each the JSA trunk's process (two seeds as
# replicas, experiment=jsa_paper, compiled), 250 steps of its first epoch without validation, Lightning's simple
# profiler on (where a step's time goes):
#   solo         alone on the GPU: the step time the verdict's sizing assumes (replicas_compiled_jsa_h200.txt)
#   a, b         two at once, as verdict.sh runs JSA's and RWS's processes side by side
#   a1, b1       two at once with OMP_NUM_THREADS=1: whether CPU threads of the two processes slow each other
#   determined-compiled  alone, under trainer.deterministic=true (cuBLAS's deterministic workspace): whether the
#                compiled step runs with only deterministic kernels, else which one PyTorch refuses
#   eager        alone, model.compile=false
#   determined   eager under trainer.deterministic=true
# train_step.txt: each run's steady ms/step (the wall time between its logged steps 50 and 250) and the profiler's
# means; determinism.txt: whether the compiled runs' logged losses agree bit for bit, step by step. The limits sum to
# 540 s: the call ends within 590 s.
. "$(dirname "$0")/setup.sh"
set -f  # no globbing: replicas.seeds=[0,1] is an override, not a pattern
if [ -n "$TOY" ]; then
    STEPS=6 LIMIT=300 EAGER_LIMIT=120 TOY_ARGS="trainer.log_every_n_steps=2 data.batch_size=8 model.mis_steps=2" BATCH=8
else
    STEPS=250 LIMIT=90 EAGER_LIMIT=45 TOY_ARGS="" BATCH=200
fi
step compiled-equals-eager $LIMIT python3 -m benchmarks.studies.compiled_equals_eager --batch $BATCH --out "$OUT/compiled_equals_eager.txt"
DET=$(mktemp -d)
RUN="experiment=jsa_paper model=jsa model.cache_start_epoch=null replicas.seeds=[0,1] trainer.max_steps=$STEPS
     trainer.limit_val_batches=0 trainer.num_sanity_val_steps=0 run_test=false trainer.profiler=simple $TOY_ARGS"
train() {  # train NAME LIMIT ARGS...: one train.py process, its output in $DET/NAME.out, its runs in $DET/NAME
    local name=$1 limit=$2
    shift 2
    step "$name" "$limit" bash -c 'exec python3 train.py "$@" > "$0" 2>&1' "$DET/$name.out" $RUN log_dir="$DET/$name" "$@"
}
train solo $LIMIT model.compile=step
train a $LIMIT model.compile=step & train b $LIMIT model.compile=step; wait
OMP_NUM_THREADS=1 train a1 $LIMIT model.compile=step & OMP_NUM_THREADS=1 train b1 $LIMIT model.compile=step; wait
CUBLAS_WORKSPACE_CONFIG=:4096:8 train determined-compiled $LIMIT model.compile=step trainer.deterministic=true
train eager $EAGER_LIMIT model.compile=false
CUBLAS_WORKSPACE_CONFIG=:4096:8 train determined $EAGER_LIMIT model.compile=false trainer.deterministic=true
python3 -m benchmarks.studies.train_step_check "$DET" solo a b a1 b1 determined-compiled eager determined --compiled 6 \
    --train-step "$OUT/train_step.txt" --determinism "$OUT/determinism.txt" >> "$LOG" 2>&1
exit 0
