#!/bin/bash
# Every command of LEASES.md on the CPU at toy scale, as the device would run it: in a virtualenv of the device's
# versions (Python 3.12, torch 2.11.0, torchvision 0.26.0, lightning 2.6.6 and the rest of its image that the project
# uses, but none of the carried packages), on a fresh copy of the working tree and .verdict/ for each call, $OUT checked against the device's limits, the results of a
# lease unpacked into the next lease's tree as the lead commits them; the last report must have every arm and every
# pre-registered comparison. From the repository root:
#   VENV=/work/venv312 bash benchmarks/results/verdict-study/lease/dry_run.sh   # prints where it worked, then PASS/FAIL
#   FROM=verdict ...   # to try a change again: from that call on (lease1, lease2, lease3 or verdict); a pass is a run from lease1
set -o pipefail
VENV=${VENV:?VENV: the virtualenv of the versions of the device}
HERE=benchmarks/results/verdict-study/lease
export PATH=$VENV/bin:$PATH LEASE_SCALE=toy OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
unset PYTHONPATH
fail() { echo "dry run FAIL: $*"; exit 1; }
python3 - <<'PY' || fail "the virtualenv is not the device's"
import importlib.util, sys, torch, torchvision, lightning
found = (sys.version_info[:2], torch.__version__.split("+")[0], torchvision.__version__.split("+")[0], lightning.__version__)
assert found == ((3, 12), "2.11.0", "0.26.0", "2.6.6"), f"python, torch, torchvision, lightning: {found}"
carried = [name for name in ("hydra", "omegaconf", "antlr4", "jsonargparse", "docstring_parser", "typeshed_client")
           if importlib.util.find_spec(name)]
assert not carried, f"{carried} installed in the virtualenv: the device has none of them, the wheels carry them"
PY
bash $HERE/prepare.sh "${DATA_DIR:-/work/shared/data}" || fail "prepare.sh"
WORK=$(mktemp -d /tmp/lease-dry-run.XXXXXX)
echo "dry run in $WORK"
RESULTS=()  # the tarballs the lead would commit, in order
TRUNKS=()  # the trunk checkpoints' parts a jsa-trunk call returned, which the lead commits under trunks/

fresh_machine() {  # the tree a call sends (tracked, untracked-not-ignored, the carried .verdict) and the results so far
    rm -rf "$WORK/tree" "$WORK/site" && mkdir -p "$WORK/tree"
    git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$WORK/tree" 2>/dev/null
    cp -r .verdict "$WORK/tree/"
    for tgz in "${RESULTS[@]}"; do tar -C "$WORK/tree/benchmarks/results/verdict-study" -xzf "$tgz" || fail "unpack $tgz"; done
    mkdir -p "$WORK/tree/benchmarks/results/verdict-study/trunks"
    for part in "${TRUNKS[@]}"; do cp "$part" "$WORK/tree/benchmarks/results/verdict-study/trunks/" || fail "copy $part"; done
}

call() {  # call NAME SCRIPT ARGS...: one run-tool call on the machine as it is; $OUT checked as the tool returns it
    local name=$1 out=$WORK/out-$1
    shift
    mkdir -p "$out"
    local start=$SECONDS
    (cd "$WORK/tree" && OUT=$out LEASE_SITE=$WORK/site bash "$@") > "$WORK/$name.stdout" 2>&1
    local status=$?
    echo "$name: exit $status in $((SECONDS - start)) s; \$OUT: $(cd "$out" && ls | tr '\n' ' ')"
    [ $status = 0 ] || { tail -n 30 "$out/lease.log" "$WORK/$name.stdout"; fail "$name exited $status"; }
    grep -E "^[a-zA-Z0-9-]+ exit [1-9]" "$out/lease.log" && { tail -n 40 "$out/lease.log"; fail "$name: a step failed"; }
    local files=$(find "$out" -type f | wc -l)
    [ "$files" -le 8 ] || fail "$name: $files files in \$OUT (at most 8 come back)"
    find "$out" -type f -size +16M | grep . && fail "$name: a file over 16 MiB"
    find "$out" -mindepth 3 -type f | grep . && fail "$name: a file more than 2 folders down"
    find "$out" | sed "s|^$out||" | grep '[^A-Za-z0-9._/-]' && fail "$name: a name the tool does not return"
    for tgz in "$out"/*.tgz; do [ -e "$tgz" ] && RESULTS+=("$tgz"); done
    for part in "$out"/*.ckpt.gz.*; do [ -e "$part" ] && TRUNKS+=("$part"); done
}

FROM=${FROM:-lease1}
[ "$FROM" = lease1 ] || [ "$FROM" = lease2 ] || [ "$FROM" = lease3 ] || [ "$FROM" = verdict ] ||
    fail "FROM=$FROM: expected lease1, lease2, lease3 or verdict"
if [ "$FROM" = lease1 ]; then
    fresh_machine; call lease1 $HERE/lease1.sh
    for table in replicas_eager.txt replicas_compiled_jsa.txt replicas_compiled_rws.txt; do
        [ -s "$WORK/out-lease1/$table" ] || fail "lease 1: no $table"
    done
    grep -q "validation: R =  2" "$WORK/out-lease1/replicas_eager.txt" || fail "lease 1: no validation timed"
    for model in jsa rws; do
        grep -q "^$model compiled (model.compile=step): R =  1" "$WORK/out-lease1/replicas_compiled_$model.txt" ||
            fail "lease 1: no compiled $model line"
    done
    # The sizing, here as after a real lease 1 (the CPU's toy figures fit no plan: that answer is a pass too).
    PYTHONPATH=$PWD python3 -m benchmarks.studies.verdict_sizing "$WORK"/out-lease1/replicas_*.txt > "$WORK/sizing.txt" 2>&1 ||
        grep -q "no plan fits" "$WORK/sizing.txt" || { cat "$WORK/sizing.txt"; fail "verdict_sizing"; }
    echo "sizing: $(tail -n 1 "$WORK/sizing.txt")"
fi
if [ "$FROM" = lease1 ] || [ "$FROM" = lease2 ]; then
    fresh_machine; call lease2 $HERE/lease2.sh
    for table in compiled_equals_eager.txt train_step.txt determinism.txt; do
        [ -s "$WORK/out-lease2/$table" ] || fail "lease 2: no $table"
    done
    # every run timed (on the CPU both deterministic runs run too), the profiler's table read
    [ "$(grep -c "ms/step over steps" "$WORK/out-lease2/train_step.txt")" = 8 ] &&
        grep -q "solo: .* profiler means (ms): batch" "$WORK/out-lease2/train_step.txt" ||
        { cat "$WORK/out-lease2/train_step.txt"; fail "lease 2: a run not timed, or the profiler's means not read"; }
    [ "$(grep -c ": equal;" "$WORK/out-lease2/compiled_equals_eager.txt")" = 3 ] ||
        { cat "$WORK/out-lease2/compiled_equals_eager.txt"; fail "lease 2: the compiled step not equal to the eager one"; }
    grep -q "^a against solo, .*: identical\|^a against solo, .*: differ" "$WORK/out-lease2/determinism.txt" ||
        { cat "$WORK/out-lease2/determinism.txt"; fail "lease 2: the compiled runs not compared"; }
fi
if [ "$FROM" != verdict ]; then
    fresh_machine; call lease3 $HERE/lease3.sh
    for table in gpu_estimators_rows.txt gpu_estimators_rows_fused_adam.txt gpu_estimators_rows_L16.txt; do
        [ -s "$WORK/out-lease3/$table" ] || fail "lease 3: no $table"
    done
fi
fresh_machine; call verdict-0 $HERE/verdict.sh 1 0        # seed 0: JSA's processes and RWS's side by side
# seed 1: JSA's trunk, its arms on another machine from the trunk's returned parts, then RWS's, each a call of its own
fresh_machine; call verdict-1-trunk $HERE/verdict.sh 1 1 jsa-trunk
[ "${#TRUNKS[@]}" -ge 1 ] || fail "verdict-1-trunk: no trunk checkpoint parts in \$OUT"
fresh_machine; call verdict-1-arms $HERE/verdict.sh 1 1 jsa-arms
grep -q "jsa-arms-s1-1-from2: 3 runs" "$WORK/out-verdict-1-arms/lease.log" || fail "verdict-1-arms: the arms did not train"
grep -q "jsa-trunk-s1-1-to2: " "$WORK/out-verdict-1-arms/lease.log" && fail "verdict-1-arms: the trunk trained again"
fresh_machine; call verdict-1-rws $HERE/verdict.sh 1 1 rws
REPORT=$WORK/report.md
tar -xzf "${RESULTS[-1]}" -O report.md > "$REPORT" || fail "no report came back"
echo "the report: $REPORT"
python3 - "$REPORT" <<'PY' || fail "the report lacks an arm or a comparison"
import re, sys
report = open(sys.argv[1]).read()
arms = ["JSA, no cache", "JSA, the paper's cache", "JSA, cache from epoch", "RWS"]
missing = [arm for arm in arms if not re.search(rf"^\| {re.escape(arm)}[^|]* \| 2 \|", report, re.M)]
assert not missing, f"arms without 2 seeds in the table: {missing}"
assert "not yet measured" not in report, "a pre-registered comparison not made"
rows = [line for line in report.splitlines() if re.match(r"^\| (test NLL|NLL, )", line)]
assert len(rows) == 15, f"{len(rows)} comparison rows, expected 10 + 5 refit-q"
print(f"the report has the 4 arms at 2 seeds and all {len(rows)} comparisons")
PY
echo "dry run PASS from $FROM ($SECONDS s)"
