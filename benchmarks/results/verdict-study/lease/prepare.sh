#!/bin/bash
# The CPU side, once before a lease, from the repository root: fills the git-ignored folder .verdict/ that every lease
# carries (carry [".verdict"]): MNIST gzipped, and the wheels of the packages the device lacks (hydra-core, omegaconf,
# antlr4-python3-runtime, jsonargparse[signatures]; torch, torchvision, lightning, torchmetrics, tensorboard,
# matplotlib, PyYAML and typing-extensions are in the device's image: /work/.library/device/KINDS.md). Then prints
# the size of what a call sends: the working tree git does not ignore, plus .verdict (at most 64 MiB).
#   bash benchmarks/results/verdict-study/lease/prepare.sh [DATA_DIR]   # DATA_DIR holding MNIST/raw (default $DATA_DIR)
set -eo pipefail
DATA=${1:-${DATA_DIR:?give the folder holding MNIST/raw (or set DATA_DIR)}}
PYTHON=${PYTHON:-python3}
# name==version of each wheel: one version of each (two stop the device's install), the versions the suite runs with
WHEELS="hydra-core==1.3.8 omegaconf==2.3.1 jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0"
ANTLR=antlr4-python3-runtime==4.9.3  # omegaconf 2.3's and hydra 1.3's parser: an sdist only, built here into a wheel
mkdir -p .verdict/whl .verdict/data/MNIST/raw
for f in "$DATA"/MNIST/raw/*-ubyte; do
    [ -s ".verdict/data/MNIST/raw/$(basename "$f").gz" ] || gzip -9c "$f" > ".verdict/data/MNIST/raw/$(basename "$f").gz"
done
[ "$(ls .verdict/data/MNIST/raw/*.gz | wc -l)" = 4 ] || { echo "prepare: expected the 4 MNIST files in $DATA/MNIST/raw" >&2; exit 1; }
for wheel in $WHEELS; do  # one name a call: pip saves nothing of a call in which one name fails
    ls .verdict/whl | grep -qi "^$(echo "${wheel%%==*}" | tr - _)-${wheel##*==}-" ||
        "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d .verdict/whl "$wheel"
done
ls .verdict/whl | grep -qi "^antlr4_python3_runtime-${ANTLR##*==}-" || "$PYTHON" -m pip wheel -q --no-deps -w .verdict/whl "$ANTLR"
[ "$(ls .verdict/whl/*.whl | wc -l)" = 6 ] || { echo "prepare: expected 6 wheels in .verdict/whl: $(ls .verdict/whl)" >&2; exit 1; }
# What a call sends: tracked and untracked-not-ignored files, and the carried folder (bytes, shown in MiB).
bytes() { awk '{s += $1} END {print s + 0}'; }
mib() { awk -v s="$1" 'BEGIN {printf "%.1f MiB", s / 1048576}'; }
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | bytes)
wheels=$(find .verdict/whl -type f -printf '%s\n' | bytes) mnist=$(find .verdict/data -type f -printf '%s\n' | bytes)
sent=$((tree + wheels + mnist))
echo "prepare: a call sends $(mib $sent) of at most 64 MiB: the working tree $(mib $tree), .verdict $(mib $((wheels + mnist)))" \
     "(MNIST $(mib $mnist), wheels $(mib $wheels))"
[ "$sent" -le $((64 * 1048576)) ] || { echo "prepare: over the device's 64 MiB" >&2; exit 1; }
