#!/usr/bin/env bash
# Run a sweep on the cluster's head node (`ray exec clusters/aws.yaml --tmux "~/privauditor/clusters/run.sh
# SWEEP [privauditor run options]"`): results in /mnt/results/SWEEP on the shared file system. Rerunning
# the same command resumes: finished cells (DONE) are skipped.
set -euo pipefail
sweep="${1:?usage: run.sh SWEEP [options]}"
shift
export WANDB_MODE="${WANDB_MODE:-offline}"  # `wandb sync` later, or set online with a key
exec ~/venv/bin/privauditor run "$sweep" --address auto --out "/mnt/results/$(basename "$sweep" .yaml)" "$@"
