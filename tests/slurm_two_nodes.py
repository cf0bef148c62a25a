"""One process of the two-node job of tests/test_slurm_cluster.py, started by the train rule's
launcher as it plans several nodes (`srun --nodes=2 ... scripts/launch_accelerate.sh
--config_file config/accelerate/fsdp2.yaml --num_processes 2 -m slurm_two_nodes OUT MODEL
CONFIG`): it writes what the launch gave it (rank, world, rendezvous, the SLURM node and task)
to OUT/rank{RANK}.json, then computes `repro bench twin`'s reference (the 2-process FSDP2
losses against one unsharded float32 process) into OUT/reference.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "SLURMD_NODENAME", "SLURM_PROCID", "SLURM_NODEID", "SLURM_JOB_ID")


def main(out: Path, model: str, config: str) -> None:
    from repro.bench.twin_worker import reference

    out.mkdir(parents=True, exist_ok=True)
    seen = {key: os.environ.get(key) for key in KEYS}
    (out / f"rank{seen['RANK']}.json").write_text(json.dumps(seen))
    reference(out / "reference.json", Path(model), json.loads(config))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
