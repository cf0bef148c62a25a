#!/usr/bin/env bash
# The GPU preflight (`repro bench gpu`) as one timeout-safe command; writes $OUT/preflight.json
# (and $OUT/preflight/<shape>/*.log). Run in the repository root of a GPU node, e.g. through the
# device tool of a session with a lent H200:
#   run(command="bash scripts/preflight.sh", carry=[".whl"], timeout_s=560)
# `repro bench gpu` stops itself at PREFLIGHT_BUDGET_S (default 480 s for both shapes, dense
# Qwen3 and Qwen3-Next; each stage also within its own budget); the outer `timeout` is the
# backstop, 60 s later, so the JSON of a run stopped by its own budget always comes back.
#
# The device image has torch, transformers and accelerate but not trl, datasets and their
# pure-Python needs, and no network: carry them as wheels in .whl (here, in the repo root):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
# vLLM (hundreds of MB) cannot travel: where it is missing, the vLLM stages are `skipped` with
# the reason and rollouts use HF generate. On a node with the project's GPU env (vLLM 0.31),
# run the same command with nothing carried.
# The models and their fp32 saves (~45 GB over both shapes) are written under PREFLIGHT_WORK
# (default /tmp/preflight-work), outside $OUT, whose packing lost the first H200 call's results;
# only the JSON, the progress files and the logs are copied to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:?set OUT to the folder the JSON goes to}
work=${PREFLIGHT_WORK:-/tmp/preflight-work}
budget=${PREFLIGHT_BUDGET_S:-480}
py=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# fail in seconds, not after a model build, when a package is missing
"$py" -c "import torch, trl, datasets, repro.engines.trl_trainer, repro.bench.gpu
assert torch.cuda.is_available(), 'no GPU visible'
print('torch', torch.__version__, '| trl', trl.__version__, '| GPUs', torch.cuda.device_count())" \
  || exit 4
timeout --kill-after=15 $((${budget%.*} + 60)) "$py" -c 'from repro.cli import main; main()' bench gpu \
  --out "$work" --budget-s "$budget" "$@"
rc=$?
mkdir -p "$out/preflight"
(cd "$work" && find . \( -path '*/model' -o -path '*/saved' \) -prune -o -type f \
  \( -name '*.json' -o -name '*.log' \) -size -20M -print0 | xargs -0 -r cp --parents -t "$out/preflight")
cp "$work/preflight.json" "$out/preflight.json" 2>/dev/null || echo "no preflight.json"
echo "repro bench gpu exit $rc"
exit $rc
