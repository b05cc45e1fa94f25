#!/bin/bash
# `make run` as on a fresh machine, on one that is not: run as root on a quiet machine.
#   bench/learning/fresh_make_run.sh [WORK]   (WORK defaults to /tmp/fresh)
# Removes bubblewrap and debootstrap (make run installs them again) and cleans apt's cache;
# clones this checkout's HEAD into WORK/whetstone (no venv); points pip's cache, the gate
# reports, the sandbox trees, DeepSpeed's compiled ops and the Hugging Face cache at empty
# folders under WORK/cache; then times `make run` with /usr/bin/time -v, each output line
# prefixed with the time of day, into WORK/make_run.log. The run is WORK/whetstone/runs/<id>.
set -euo pipefail
work=${1:-/tmp/fresh}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
apt-get remove -y -qq bubblewrap debootstrap >/dev/null
apt-get clean
rm -rf "$work/whetstone" "$work/cache"
mkdir -p "$work/cache"
git clone -q "$repo" "$work/whetstone"
export PIP_CACHE_DIR=$work/cache/pip WHET_GATE_CACHE=$work/cache/gates \
  TORCH_EXTENSIONS_DIR=$work/cache/torchext HF_HOME=$work/cache/hf \
  MPLCONFIGDIR=$work/cache/mpl WHET_ENVS_DIR=$work/cache/envs
cd "$work/whetstone"
git log --oneline -1
/usr/bin/time -v make run 2>&1 | while IFS= read -r line; do
  printf '%s %s\n' "$(date +%T)" "$line"
done > "$work/make_run.log"
grep -E "Elapsed|Exit status" "$work/make_run.log"
