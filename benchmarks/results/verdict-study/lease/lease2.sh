#!/bin/bash
# Lease 2 (LEASES.md): the determinism check (PLAN.md), then the gradient-rows table. Ends within 590 s.
# 1. The study's JSA trunk process (two seeds as replicas, compiled as the study runs it), its first 5 epochs twice as
#    configured (side by side) and once under trainer.deterministic=true (CUBLAS_WORKSPACE_CONFIG: cuBLAS's
#    deterministic mode): whether the two agree bit for bit, and which kernel PyTorch refuses (its error names it).
# 2. Compiled JSA on k + 1 gradient rows against RWS and the VAE at S = L = 20, with Adam fused, and at L = 16 on the
#    conv backbone (benchmarks/speed/gpu_scaling.py --estimators), each table line by line to $OUT.
. "$(dirname "$0")/setup.sh"
if [ -n "$TOY" ]; then
    EPOCHS=1 COMPILE="" TRAIN="trainer.check_val_every_n_epoch=1 trainer.limit_train_batches=3 trainer.limit_val_batches=1 data.batch_size=8 data.eval_batch_size=8 model.val_num_samples=2"
    # the tables eager on tiny networks (the last --compiled wins: none), as --quick would but for its compilations
    ROWS="--device cpu --batch-size 8 --hidden-channels 8 --particles 3 --min-run-time 0.05 --rounds 1 --backbones mlp --compiled"
    FUSED="$ROWS" L16="--device cpu --batch-size 8 --hidden-channels 8 --particles 3 --min-run-time 0.05 --rounds 1 --compiled"
else
    EPOCHS=5 COMPILE="model.compile=step" TRAIN="" ROWS="--budget-minutes 2.0" FUSED="--budget-minutes 1.0" L16="--budget-minutes 1.0"
fi
DET=$(mktemp -d)
RUN="experiment=jsa_paper model=jsa model.cache_start_epoch=null $COMPILE replicas.seeds=[0,1] trainer.max_epochs=$EPOCHS run_test=false $TRAIN"
step determinism-a 110 python3 train.py $RUN log_dir=$DET/a & step determinism-b 110 python3 train.py $RUN log_dir=$DET/b; wait
CUBLAS_WORKSPACE_CONFIG=:4096:8 step determinism-deterministic 90 python3 train.py $RUN trainer.deterministic=true log_dir=$DET/deterministic
python3 - "$DET" > "$OUT/determinism.txt" 2>&1 <<'PY'
# Every replica's last val NLL and training loss in each run: a and b agree bit for bit or they do not.
import glob, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
for run in sorted(glob.glob(f"{sys.argv[1]}/*/tensorboard/*/version_0")):
    events = EventAccumulator(run)
    events.Reload()
    tags = events.Tags()["scalars"]
    print(run[len(sys.argv[1]) + 1:], {tag: events.Scalars(tag)[-1].value for tag in ("val/nll", "train/loss_epoch", "train/loss") if tag in tags})
PY
grep -E "determinism-deterministic exit|RuntimeError" "$LOG" | tail -3 >> "$OUT/determinism.txt"
step rows 150 python3 -m benchmarks.speed.gpu_scaling --estimators --compiled jsa-chain jsa-rows4 rws vae jsa-rows2 $ROWS --out "$OUT/gpu_estimators_rows.txt"
step rows-fused-adam 85 python3 -m benchmarks.speed.gpu_scaling --estimators --fused-adam --compiled jsa-rows4 rws vae $FUSED --out "$OUT/gpu_estimators_rows_fused_adam.txt"
step rows-L16 85 python3 -m benchmarks.speed.gpu_scaling --estimators --particles 16 --backbones conv --compiled jsa-rows4 jsa-rows2 vae $L16 --out "$OUT/gpu_estimators_rows_L16.txt"
exit 0
