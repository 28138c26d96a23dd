#!/bin/bash
# Lease 1 (LEASES.md): the replica throughput table at the study's batch 200, JSA and RWS at R = 1, 4, 8, 16, 32:
# eager (with the MPS probe, and one whole 1000-sample validation of the R replicas timed at each R), then compiled
# (model.compile=step, with each R's compilation timed). The verdict's commands are sized from these two files
# (python -m benchmarks.speed.verdict_sizing). Ends within 590 s: each step under its own limit, each table written
# line by line to $OUT, so a step cut short keeps what it measured.
. "$(dirname "$0")/setup.sh"
if [ -n "$TOY" ]; then
    # R = 1 compiled only, with a long limit: inductor on 2 shared cores takes minutes a compilation
    TABLE="--quick --seconds 0.05" COMPILED="--quick --replicas 1 --seconds 0.05" COMPILED_LIMIT=1500
else
    TABLE="--mps-probe --lanes 8 --seconds 1" COMPILED="--seconds 1" COMPILED_LIMIT=410
fi
step replicas-eager 150 python3 -m benchmarks.speed.replica_throughput --no-compile $TABLE --out "$OUT/replicas_eager.txt"
# twelve compilations (the plain step and five R, two models), about half a minute each on an H200
step replicas-compiled $COMPILED_LIMIT python3 -m benchmarks.speed.replica_throughput --compiled-only --val-images 0 $COMPILED --out "$OUT/replicas_compiled.txt"
exit 0
