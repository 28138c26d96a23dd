#!/bin/bash
# Lease 3 (LEASES.md): the gradient-rows tables (benchmarks/speed/gpu_scaling.py --estimators). Compiled JSA on k + 1
# gradient rows against compiled RWS and the VAE at S = L = 20 on both backbones, then at L = 16 on the conv backbone,
# then with Adam fused; each table written when its step ends. At CALL_LIMIT 600 (the default) the limits sum to
# 540 s, each budget 25 s under its limit; a shorter CALL_LIMIT scales them alike (below about 420 s the later tables
# compile little: LEASES.md gives lease 3 a call of its own then).
. "$(dirname "$0")/setup.sh"
CALL_LIMIT=${CALL_LIMIT:-600}
scaled() { python3 -c "print(round($1 * ($CALL_LIMIT - 60) / 540, 2))"; }  # the limits fill CALL_LIMIT less 60 s
if [ -n "$TOY" ]; then
    # the tables eager on tiny networks (the last --compiled wins: none), as --quick would but for its compilations
    ROWS="--device cpu --batch-size 8 --hidden-channels 8 --particles 3 --min-run-time 0.05 --rounds 1 --backbones mlp --compiled"
    L16="--device cpu --batch-size 8 --hidden-channels 8 --particles 3 --min-run-time 0.05 --rounds 1 --compiled" FUSED="$ROWS"
    LIMITS=(120 120 120)
else
    ROWS="--budget-minutes $(scaled 4.08)" L16="--budget-minutes $(scaled 1.58)" FUSED="--budget-minutes $(scaled 2.08)"
    LIMITS=($(scaled 270 | cut -d. -f1) $(scaled 120 | cut -d. -f1) $(scaled 150 | cut -d. -f1))
fi
step rows ${LIMITS[0]} python3 -m benchmarks.speed.gpu_scaling --estimators --compiled jsa-chain jsa-rows4 rws vae jsa-rows2 $ROWS --out "$OUT/gpu_estimators_rows.txt"
step rows-L16 ${LIMITS[1]} python3 -m benchmarks.speed.gpu_scaling --estimators --particles 16 --backbones conv --compiled jsa-rows4 jsa-rows2 vae $L16 --out "$OUT/gpu_estimators_rows_L16.txt"
step rows-fused-adam ${LIMITS[2]} python3 -m benchmarks.speed.gpu_scaling --estimators --fused-adam --compiled jsa-rows4 rws vae $FUSED --out "$OUT/gpu_estimators_rows_fused_adam.txt"
exit 0
