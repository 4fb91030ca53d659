#!/usr/bin/env bash
# GPU check: a small real sweep on one GPU with no network (benchmarks/sweeps/gpu.yaml: tiny-llama x 6
# techniques x finance, full fine-tuning under DeepSpeed ZeRO-2 in Ray Train), then per-cell times and
# checks: every cell DONE, trained and scored on the GPU, finite metrics. Exit 0 only if all hold.
# Needs the project installed with the scale extra and a CUDA build of torch 2.13.0; the tiny bases are
# pre-trained on first use (about a minute with the fast profile) unless PRIVAUDITOR_CACHE has them.
#   benchmarks/gpu_check.sh [OUT]          # default OUT: a fresh temporary folder
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d -t privauditor-gpu.XXXXXX)}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export PRIVAUDITOR_PRETRAIN_PROFILE="${PRIVAUDITOR_PRETRAIN_PROFILE:-fast}"
python=${PYTHON:-python}
"$python" - <<'PY'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA device")
print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, bf16 {torch.cuda.is_bf16_supported()}")
PY
start=$(date +%s)
status=0
"$python" -m privauditor.orchestrator.cli run gpu --out "$out" || status=$?
echo "gpu_check: sweep exit $status after $(( $(date +%s) - start )) s; results in $out"
"$python" benchmarks/gpu_report.py "$out" && [ "$status" -eq 0 ]
