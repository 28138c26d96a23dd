#!/bin/bash
# Lease 1 (LEASES.md): the replica throughput table at the study's batch 200, JSA and RWS at R = 1, 4, 8, 16, 32:
# eager (with the MPS probe, and one whole 1000-sample validation of the R replicas timed at each R), then compiled
# (model.compile=step, each R's compilation timed), JSA and RWS under limits of their own, so that a slow compilation
# of one leaves the other measured. The verdict's commands are sized from these files
# (python -m benchmarks.studies.verdict_sizing). Ends within 590 s: each table written line by line to $OUT, so a step
# cut short keeps what it measured.
. "$(dirname "$0")/setup.sh"
if [ -n "$TOY" ]; then
    # R = 1 compiled only, with long limits: inductor on 2 shared cores takes minutes a compilation
    TABLE="--quick --seconds 0.05" COMPILED="--quick --replicas 1 --seconds 0.05" JSA_LIMIT=900 RWS_LIMIT=600
else
    TABLE="--mps-probe --lanes 8 --seconds 1" COMPILED="--seconds 1" JSA_LIMIT=250 RWS_LIMIT=160
fi
step replicas-eager 150 python3 -m benchmarks.speed.replica_throughput --no-compile $TABLE --out "$OUT/replicas_eager.txt"
# six compilations a model (the plain step and five R): JSA's about 25 s each on an H200, RWS's about 6 s
for model in jsa rws; do
    limit=$([ $model = jsa ] && echo $JSA_LIMIT || echo $RWS_LIMIT)
    step replicas-compiled-$model $limit python3 -m benchmarks.speed.replica_throughput --compiled-only --models $model \
        --val-images 0 $COMPILED --out "$OUT/replicas_compiled_$model.txt"
done
exit 0
