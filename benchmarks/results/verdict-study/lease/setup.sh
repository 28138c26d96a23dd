# Sourced by every lease script, on the device (or by dry_run.sh on the CPU): the carried wheels installed as the device
# README says, MNIST unpacked, the versions written down. LEASE_SCALE=toy (dry_run.sh) picks the toy sizes of the
# scripts; the device runs them at full scale (LEASE_SCALE unset). Everything the scripts write to keep lies in $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${OUT:?OUT: the folder whose files come back (the run tool sets it)}"
SITE=${LEASE_SITE:-/tmp/site}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .verdict/whl/*.whl || exit 1
export PYTHONPATH=$SITE:$PWD DATA_DIR=$PWD/.verdict/data
for f in .verdict/data/MNIST/raw/*.gz; do gunzip -kf "$f" || exit 1; done
LOG=$OUT/lease.log
python3 -c "import sys, torch, torchvision, lightning, hydra, omegaconf, jsonargparse
print('python', sys.version.split()[0], 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'lightning',
      lightning.__version__, 'hydra', hydra.__version__, 'omegaconf', omegaconf.__version__, 'jsonargparse', jsonargparse.__version__,
      'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')" 2>&1 | tee -a "$LOG" || exit 1
TOY=$([ "${LEASE_SCALE:-}" = toy ] && echo 1)

# step NAME SECONDS COMMAND...: COMMAND under `timeout SECONDS`, its output appended to $LOG, its wall time and exit
# status to $LOG as `NAME: 12.3 s, exit 0` (bash's time: nothing to install).
step() {
    local name=$1 limit=$2 status
    shift 2
    echo "== $name (at most $limit s): $*" >> "$LOG"
    TIMEFORMAT="$name: %R s,"
    { time timeout "$limit" "$@" >> "$LOG" 2>&1; status=$?; } 2>> "$LOG"
    echo "$name exit $status" >> "$LOG"
    return $status
}
