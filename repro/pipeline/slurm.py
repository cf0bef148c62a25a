"""The SLURM executor plugin, checked from the workflow's main process when it submits jobs
(the Snakefile's `onstart`): the command that polls job states, and a one-line notice for a job
that SLURM holds back for a reason other than the queue.

The status command: the plugin polls `sacct` whenever `sacct` is on PATH (also when told
`squeue`, if MinJobAge < 3 x slurm-init-seconds-before-status-checks). On a cluster without
accounting (AccountingStorageType=accounting_storage/none, as on many small clusters) `sacct`
only says "Slurm accounting storage is disabled"; the plugin logs that in debug output alone,
never sees a job end and waits forever in silence (plugin 2.8.0 on SLURM 22.05, docs/slurm.md).
Here the executor is switched to `squeue` with one line where the cluster keeps finished jobs
long enough for it, else the run is refused in one line naming the setting.

Cancelled jobs: `sacct` writes a job cancelled by a user or an admin as "CANCELLED by UID";
the plugin matches states exactly, takes that one for a running job and waits forever in
silence (2.8.0; Snakemake-Profiles/slurm fixed the same in its status script in 2019, PR 22).
`squeue` writes "CANCELLED". The plugin's state query is wrapped to drop the " by UID".
The plugin then reports the cancel as "Reason: Unknown" (it asks sacct for the reasons of job
steps 0-9, which a batch job's "batch" step is not); `wrap_cancel_report` says who cancelled it,
from sacct's State and Reason of the job itself.

Pending jobs: the plugin says nothing while a job waits, so a drained or down node, a partition
limit or a held job looks like a hung workflow; `watch_pending` says which job waits and why.

Refused submissions: when sbatch refuses a job (a request no node can hold, an unknown account),
the plugin reports a job error and Snakemake resubmits it `retries` times, though the same
request gets the same answer. `wrap_sbatch_refusal` lets a retry happen only where the profile
makes the request depend on `attempt`.
"""

from __future__ import annotations

import pwd
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

# squeue reasons of a job that waits its turn in a working queue: not worth a line
QUEUE_REASONS = frozenset({"None", "Priority", "Resources", "Dependency", "BeginTime"})


def sacct_failure() -> str | None:
    """None when `sacct` answers on this cluster (or is not on PATH: the plugin then polls
    squeue), else the first line it printed."""
    if shutil.which("sacct") is None:
        return None
    proc = subprocess.run(["sacct", "-X", "-n", "-P", "--format=JobIDRaw", "--starttime", "now"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode == 0:
        return None
    said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    return said[0] if said else f"exit status {proc.returncode}"


def status_command(setting: str, failure: str | None, min_job_age: int | None,
                   init_seconds: int) -> tuple[str, str | None]:
    """(the command the executor must poll, a line saying why it changed or None). The plugin
    accepts squeue only while MinJobAge >= 3 x init_seconds (below, finished jobs could leave
    squeue between two polls): where sacct fails too, no command works (ValueError)."""
    if failure is None:
        return setting, None
    if min_job_age is not None and min_job_age >= 3 * init_seconds:
        if setting == "squeue":
            return setting, None
        return "squeue", (f"slurm: sacct fails on this cluster ({failure}); the executor polls "
                          f"squeue instead (finished jobs stay in it for MinJobAge = "
                          f"{min_job_age} s)")
    fix = (f"set slurm-init-seconds-before-status-checks: {min_job_age // 3} in your profile"
           if min_job_age and min_job_age >= 3
           else "ask for SLURM accounting or a longer MinJobAge")
    raise ValueError(f"slurm: sacct fails on this cluster ({failure}) and the executor polls "
                     f"squeue only while MinJobAge ({min_job_age} s) >= 3 x slurm-init-seconds-"
                     f"before-status-checks ({init_seconds} s), so it would never see a job end: "
                     f"{fix}")


def pending_notices(rows: list[tuple[str, str, str]], told: dict[str, str],
                    out_of_service: Callable[[], str]) -> list[str]:
    """Lines about pending jobs, given squeue's (job id, reason, comment) of this run's pending
    jobs: one when a job starts waiting for a reason other than its turn, one when such a job
    stops pending. `told` (job id -> reason said) is updated; `out_of_service` describes the
    drained or down nodes."""
    lines = []
    pending = {job: (reason, comment) for job, reason, comment in rows}
    for job in sorted(set(told) - set(pending)):
        lines.append(f"slurm: job {job} is no longer pending (was: {told.pop(job)})")
    for job, (reason, comment) in pending.items():
        if reason in QUEUE_REASONS or told.get(job) == reason:
            continue
        told[job] = reason
        nodes = out_of_service() if "DOWN" in reason or "ReqNodeNotAvail" in reason else ""
        lines.append(f"slurm: job {job} ({comment}) is pending: {reason}"
                     + (f"; nodes out of service: {nodes}" if nodes else ""))
    return lines


def _squeue_pending(run_name: str) -> list[tuple[str, str, str]]:
    out = subprocess.run(["squeue", "--noheader", "--states=PENDING", "--name", run_name,
                          "--format=%i|%r|%k"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return [tuple(line.split("|", 2)) for line in out.splitlines() if line.count("|") >= 2]


def _out_of_service() -> str:
    """'NODE STATE (REASON)' of every drained or down node, from `sinfo -R`."""
    out = subprocess.run(["sinfo", "-R", "--noheader", "--format=%N|%T|%E"], capture_output=True,
                         text=True, timeout=60).stdout
    return ", ".join(f"{n} {s} ({r})" for n, s, r in
                     (line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2))


def watch_pending(run_name: str, say: Callable[[str], None], every: float) -> threading.Thread:
    """A daemon thread that polls squeue every `every` seconds for the jobs named `run_name`
    and says `pending_notices`' lines (a failed poll is skipped: the executor reports cluster
    errors)."""
    def loop() -> None:
        told: dict[str, str] = {}
        while True:
            time.sleep(every)
            try:
                lines = pending_notices(_squeue_pending(run_name), told, _out_of_service)
            except (OSError, subprocess.SubprocessError):
                continue
            for line in lines:
                say(line)

    thread = threading.Thread(target=loop, name="repro-slurm-pending", daemon=True)
    thread.start()
    return thread


def plain_states(states: dict[str, str] | None) -> dict[str, str] | None:
    """Job states as the plugin matches them: sacct's "CANCELLED by 0" is "CANCELLED"."""
    return None if states is None else {job: state.split(" by ", 1)[0]
                                        for job, state in states.items()}


def wrap_state_query(plugin: Any) -> None:
    """Make the executor plugin module's `query_job_status` return `plain_states` (once)."""
    query = plugin.query_job_status
    if getattr(query, "plain_states", False):
        return

    async def query_job_status(command: str, logger: Any):
        states, seconds = await query(command, logger)
        return plain_states(states), seconds

    query_job_status.plain_states = True
    plugin.query_job_status = query_job_status


def cancel_cause(sacct_line: str) -> str | None:
    """Who or what cancelled a job, from sacct's "State|Reason" of it ("CANCELLED by 0|None"):
    "cancelled by user root (uid 0)", with SLURM's reason where it gives one; None when the
    line names no canceller and no reason (or is not a cancelled job's)."""
    state, _, reason = sacct_line.strip().partition("|")
    match = re.fullmatch(r"CANCELLED(?: by (\d+))?", state.strip())
    if match is None:
        return None
    reason = "" if reason.strip() in ("", "None") else reason.strip()
    if match[1] is None:
        return f"cancelled (SLURM reason: {reason})" if reason else None
    uid = int(match[1])
    try:
        who = f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:  # a uid of the cluster that this host does not know
        who = f"uid {uid}"
    return f"cancelled by {who}" + (f" (SLURM reason: {reason})" if reason else "")


def _sacct_cancel_cause(job_id: str) -> str | None:
    """`cancel_cause` of a job as sacct sees it; None where sacct does not answer."""
    try:
        out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "--format=State,Reason"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.splitlines()
    return cancel_cause(lines[0]) if lines else None


CANCELLED_REPORT = "SLURM status is: 'CANCELLED'. "  # how the plugin (2.8.0) reports a cancel


def wrap_cancel_report(executor_cls: Any, cause: Callable[[str], str | None]) -> None:
    """Make the executor's report of a cancelled job say who or what cancelled it (once), in
    place of the plugin's "Reason: Unknown" (or before the step reasons it found)."""
    report = executor_cls.report_job_error
    if getattr(report, "cancel_cause", False):
        return

    def report_job_error(self: Any, job_info: Any, msg: str | None = None, **kwargs: Any) -> Any:
        job_id = getattr(job_info, "external_jobid", None)
        if msg and CANCELLED_REPORT in msg and job_id:
            said = cause(str(job_id))
            if said and "Reason: Unknown." in msg:
                msg = msg.replace("Reason: Unknown.", f"Reason: {said}.")
            elif said:
                msg = msg.replace(CANCELLED_REPORT, f"{CANCELLED_REPORT}{said[0].upper()}"
                                  f"{said[1:]}. ", 1)
        return report(self, job_info, msg, **kwargs)

    report_job_error.cancel_cause = True
    executor_cls.report_job_error = report_job_error


SBATCH_REFUSED = "SLURM sbatch failed"  # how the plugin (2.8.0) begins that job error


def same_request_on_retry(job: Any) -> bool:
    """Is the job's resource request the same at every attempt it has left (no profile
    expression of `attempt` changes it)? A group job or one that cannot tell: False."""
    rule = getattr(job, "rule", None)
    if rule is None or not hasattr(rule, "expand_resources"):
        return False
    def request(resources: Any) -> dict[str, Any]:  # tmpdir: evaluated in the job, not asked
        return {k: v for k, v in resources.items() if k != "tmpdir"}

    try:
        now = request(job.resources)
        for attempt in range(job.attempt + 1, job.restart_times + 2):
            later = rule.expand_resources(job.wildcards_dict, job.input, attempt,
                                          skip_evaluation={"tmpdir"})
            if request(later) != now:
                return False
    except Exception:  # never lose the plugin's error report to this check: keep the retries
        return False
    return True


def wrap_sbatch_refusal(executor_cls: Any, say: Callable[[str], None]) -> None:
    """Make the executor's job-error report spend a refused job's retries where its request
    cannot change (once): Snakemake then fails it at once instead of resubmitting it."""
    report = executor_cls._report_job_error_threadsafe
    if getattr(report, "no_retry_of_refusal", False):
        return

    def report_job_error(self: Any, job_info: Any, msg: str) -> Any:
        job = getattr(job_info, "job", None)
        if msg.startswith(SBATCH_REFUSED) and job is not None and job.attempt <= job.restart_times \
                and same_request_on_retry(job):
            say(f"slurm: sbatch refused rule {job.rule.name}'s job ({msg.splitlines()[0]}); the "
                "same request on a retry gets the same answer, so it is not resubmitted")
            job.attempt = job.restart_times + 1
        return report(self, job_info, msg)

    report_job_error.no_retry_of_refusal = True
    executor_cls._report_job_error_threadsafe = report_job_error


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def check_executor(workflow: Any) -> None:
    """The Snakefile's onstart under `--executor slurm`: fix or refuse the status command
    (ValueError, one line), let cancelled jobs be seen and say who cancelled them, then watch
    this run's pending jobs."""
    import snakemake_executor_plugin_slurm as plugin
    from snakemake_executor_plugin_slurm.job_status_query import get_min_job_age

    wrap_state_query(plugin)
    wrap_sbatch_refusal(plugin.Executor, _say)
    wrap_cancel_report(plugin.Executor, _sacct_cancel_cause)

    settings = workflow.executor_settings
    command, line = status_command(settings.status_command, sacct_failure(), get_min_job_age(),
                                   settings.init_seconds_before_status_checks)
    if line:
        _say(line)
        settings.status_command = command  # read again by the executor at every poll
    # the executor's SLURM job name (its "SLURM run ID"), which it does not publish otherwise
    run_name = getattr(getattr(workflow.scheduler, "_executor", None), "run_uuid", None)
    if run_name:  # at the pace of the executor's first status check (40 s by default)
        watch_pending(run_name, _say, settings.init_seconds_before_status_checks)
    else:
        _say("slurm: the SLURM executor shows no run ID; pending jobs will not be reported")
