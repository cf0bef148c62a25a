"""One log per attempt of a train job: the command Snakemake runs for the train rule (as a dry
run prints it) first moves an earlier attempt's log aside, so a retry never overwrites it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from test_workflow import dry_run  # noqa: F401 - the module-scoped plan fixture


def keep_previous(dry_run_output: str) -> tuple[str, str]:
    """(the train command's log-keeping prefix, its log path) from `snakemake -n -p` output."""
    found = re.search(r"(if \[ -s (\S+/train/\S+\.log) \].*?fi; )\S+ -m repro train ",
                      dry_run_output)
    assert found, "the train rule's command does not keep the previous attempt's log"
    return found.group(1), found.group(2)


def test_a_retry_keeps_every_attempts_log(dry_run, tmp_path):  # noqa: F811
    prefix, log = keep_previous(dry_run())
    target = tmp_path / "train.log"
    command = prefix.replace(log, str(target))
    for attempt in (1, 2, 3):  # each attempt: keep the previous log, then write its own
        subprocess.run(["bash", "-euo", "pipefail", "-c", f"{command}echo attempt {attempt} > "
                        f"{target}"], check=True)
    assert target.read_text() == "attempt 3\n"
    assert (tmp_path / "train.log.attempt-1").read_text() == "attempt 1\n"
    assert (tmp_path / "train.log.attempt-2").read_text() == "attempt 2\n"
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == [
        "train.log", "train.log.attempt-1", "train.log.attempt-2"]
