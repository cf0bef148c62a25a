#!/usr/bin/env bash
# One `accelerate launch` per node of a SLURM job. Run it as one task per node:
#   srun --nodes=N --ntasks=N --ntasks-per-node=1 scripts/launch_accelerate.sh \
#       --config_file config/accelerate/fsdp2.yaml --num_processes TOTAL -m repro train ...
# (the train rule does, rules/common.smk: train_launcher). Every node derives the same
# rendezvous from the job: machine rank = the task's rank, main process = the first host of
# the job's node list, port = 20000 + job id mod 10000 (below Linux's ephemeral range, and two
# jobs that share a node rarely collide). Arguments go to `accelerate launch` unchanged.
set -euo pipefail

for var in SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_PROCID SLURM_NODEID SLURM_NNODES; do
  if [ -z "${!var:-}" ]; then
    echo "launch_accelerate.sh: \$$var is not set; run this under srun inside a SLURM job" >&2
    exit 2
  fi
done

mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
if [ "${#hosts[@]}" -ne "$SLURM_NNODES" ]; then
  echo "launch_accelerate.sh: the step runs on $SLURM_NNODES node(s) but the job has" \
    "${#hosts[@]}; srun over every node of the job (--nodes=${#hosts[@]})" >&2
  exit 2
fi
if [ "$SLURM_PROCID" -ne "$SLURM_NODEID" ]; then
  echo "launch_accelerate.sh: task $SLURM_PROCID runs on node $SLURM_NODEID; start one task" \
    "per node (srun --ntasks-per-node=1)" >&2
  exit 2
fi

exec accelerate launch \
  --num_machines "${#hosts[@]}" \
  --machine_rank "$SLURM_PROCID" \
  --main_process_ip "${hosts[0]}" \
  --main_process_port "$((20000 + SLURM_JOB_ID % 10000))" \
  "$@"
