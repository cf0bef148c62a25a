"""repro/pipeline/slurm.py without a cluster: the status command chosen against the cluster's
accounting, sacct's "CANCELLED by UID" read as CANCELLED, the pending-job lines, and the
Snakefile's onstart wiring (tests/test_slurm_cluster.py and test_slurm_faults.py run them on a
live cluster)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import snakemake_executor_plugin_slurm as plugin
from snakemake_executor_plugin_slurm import job_status_query

from repro.pipeline import slurm

DISABLED = "Slurm accounting storage is disabled"


def test_a_working_sacct_keeps_the_setting():
    assert slurm.status_command("sacct", None, 300, 40) == ("sacct", None)
    assert slurm.status_command("squeue", None, 10, 40) == ("squeue", None)


def test_without_accounting_the_executor_polls_squeue_and_says_so_once():
    command, line = slurm.status_command("sacct", DISABLED, 300, 40)
    assert command == "squeue" and DISABLED in line and "MinJobAge = 300 s" in line
    assert "\n" not in line
    assert slurm.status_command("squeue", DISABLED, 300, 40) == ("squeue", None)


@pytest.mark.parametrize(("min_job_age", "fix"), [
    (60, "set slurm-init-seconds-before-status-checks: 20 in your profile"),
    (None, "ask for SLURM accounting or a longer MinJobAge"),
])
def test_no_command_that_can_see_jobs_end_is_refused_naming_the_setting(min_job_age, fix):
    """MinJobAge below 3 x the first status check: the plugin would poll sacct anyway."""
    with pytest.raises(ValueError) as err:
        slurm.status_command("squeue", DISABLED, min_job_age, 40)
    message = str(err.value)
    assert message.startswith("slurm: sacct fails on this cluster") and fix in message
    assert "\n" not in message


def test_cancelled_by_a_user_reads_as_cancelled():
    assert slurm.plain_states({"5": "CANCELLED by 0", "6": "COMPLETED", "7": "TIMEOUT"}) == {
        "5": "CANCELLED", "6": "COMPLETED", "7": "TIMEOUT"}
    assert slurm.plain_states(None) is None  # a failed query stays failed


def test_the_plugins_state_query_is_wrapped_once():
    async def query(command, logger):
        return {"5": "CANCELLED by 1000"}, 0.01

    module = SimpleNamespace(query_job_status=query)
    slurm.wrap_state_query(module)
    slurm.wrap_state_query(module)
    assert asyncio.run(module.query_job_status("sacct ...", None)) == ({"5": "CANCELLED"}, 0.01)
    assert module.query_job_status.__closure__[0].cell_contents is query  # not wrapped twice


def test_a_cancel_names_who_cancelled_from_sacct_lines():
    """sacct's State|Reason of a cancelled job (as on the local cluster after `scancel`)."""
    assert slurm.cancel_cause("CANCELLED by 0|None\n") == "cancelled by user root (uid 0)"
    assert slurm.cancel_cause("CANCELLED by 4242424|None") == "cancelled by uid 4242424"
    assert slurm.cancel_cause("CANCELLED by 0|DependencyNeverSatisfied") == (
        "cancelled by user root (uid 0) (SLURM reason: DependencyNeverSatisfied)")
    assert slurm.cancel_cause("CANCELLED|Prolog") == "cancelled (SLURM reason: Prolog)"
    assert slurm.cancel_cause("CANCELLED|None") is None  # SLURM does not know: nothing made up
    assert slurm.cancel_cause("TIMEOUT|None") is None
    assert slurm.cancel_cause("") is None


def _cancel_reported(msg, cause="cancelled by user root (uid 0)"):
    """The wrapped report of a job error (wrapped twice: once only); (message, job ids asked)."""
    asked, reports = [], []

    class Executor:
        def report_job_error(self, job_info, msg=None, **kwargs):
            reports.append((msg, kwargs))

    def ask(job_id):
        asked.append(job_id)
        return cause

    slurm.wrap_cancel_report(Executor, ask)
    slurm.wrap_cancel_report(Executor, ask)
    Executor().report_job_error(SimpleNamespace(external_jobid="31"), msg=msg, aux_logs=["x"])
    assert len(reports) == 1 and reports[0][1] == {"aux_logs": ["x"]}
    return reports[0][0], asked


def test_a_cancelled_jobs_report_says_who_cancelled_it():
    plain = "SLURM-job '31' failed, SLURM status is: 'CANCELLED'. Reason: Unknown."
    assert _cancel_reported(plain) == ("SLURM-job '31' failed, SLURM status is: 'CANCELLED'. "
                                       "Reason: cancelled by user root (uid 0).", ["31"])
    steps = "SLURM-job '31' failed, SLURM status is: 'CANCELLED'. Reasons: Step 0: a, Step 1: b."
    assert _cancel_reported(steps)[0] == (
        "SLURM-job '31' failed, SLURM status is: 'CANCELLED'. Cancelled by user root (uid 0). "
        "Reasons: Step 0: a, Step 1: b.")
    assert _cancel_reported(plain, cause=None) == (plain, ["31"])  # sacct knows nothing
    timeout = "SLURM-job '31' failed, SLURM status is: 'TIMEOUT'. Reason: Unknown."
    assert _cancel_reported(timeout) == (timeout, [])


def test_the_plugin_reports_a_cancel_as_the_wrapper_expects():
    """The installed plugin's message for a failed job reads as the wrapper matches."""
    import inspect

    source = inspect.getsource(plugin.Executor.check_active_jobs)
    assert "f\"SLURM status is: '{status}'. \"" in source
    assert 'reasons.append("Unknown")' in source and 'f"Reason: {reasons[0]}."' in source
    assert "self.report_job_error(j, msg=msg" in source


def test_pending_lines_name_the_job_the_reason_and_the_drained_nodes():
    told: dict[str, str] = {}
    nodes = lambda: "vm drained (maintenance)"  # noqa: E731
    drained = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher " \
              "priority partitions"
    rows = [("11", "Priority", "rule_sft_wildcards_tiny"), ("12", drained, "rule_theory")]
    lines = slurm.pending_notices(rows, told, nodes)
    assert lines == [f"slurm: job 12 (rule_theory) is pending: {drained}; nodes out of "
                     "service: vm drained (maintenance)"]
    assert slurm.pending_notices(rows, told, nodes) == []  # said once
    held = [("12", "JobHeldAdmin", "rule_theory")]
    assert slurm.pending_notices(held, told, nodes) == [
        "slurm: job 12 (rule_theory) is pending: JobHeldAdmin"]
    assert slurm.pending_notices([], told, nodes) == [
        "slurm: job 12 is no longer pending (was: JobHeldAdmin)"]
    assert told == {}


def test_onstart_switches_the_executor_and_watches_its_run(monkeypatch, capsys):
    """check_executor on a workflow whose cluster has no accounting (sacct and scontrol faked)."""
    watched = []
    monkeypatch.setattr(slurm, "sacct_failure", lambda: DISABLED)
    monkeypatch.setattr(job_status_query, "get_min_job_age", lambda: 300)
    monkeypatch.setattr(slurm, "watch_pending",
                        lambda name, say, every: watched.append((name, every)))
    monkeypatch.setattr(plugin, "query_job_status", plugin.query_job_status)  # restored after
    monkeypatch.setattr(plugin.Executor, "report_job_error", plugin.Executor.report_job_error)
    settings = SimpleNamespace(status_command="sacct", init_seconds_before_status_checks=40)
    executor = SimpleNamespace(run_uuid="repro_1234")
    slurm.check_executor(SimpleNamespace(executor_settings=settings,
                                         scheduler=SimpleNamespace(_executor=executor)))
    assert settings.status_command == "squeue" and watched == [("repro_1234", 40)]
    assert capsys.readouterr().err.startswith(f"slurm: sacct fails on this cluster ({DISABLED})")
    assert getattr(plugin.query_job_status, "plain_states", False)
    assert getattr(plugin.Executor.report_job_error, "cancel_cause", False)


class _Rule:
    name = "train"

    def __init__(self, mem_of_attempt):
        self.mem_of_attempt = mem_of_attempt

    def expand_resources(self, wildcards, input, attempt, skip_evaluation=None):
        return {"mem_mb": self.mem_of_attempt(attempt), "runtime": 30}


class _Job:
    """What the wrapper reads of a Snakemake job: its rule, attempt and retries."""

    def __init__(self, mem_of_attempt, restart_times=1):
        self.rule, self.attempt, self.restart_times = _Rule(mem_of_attempt), 1, restart_times
        self.wildcards_dict, self.input = {}, []

    @property
    def resources(self):
        return self.rule.expand_resources({}, [], self.attempt)


def _refused(job, msg="SLURM sbatch failed. The error message was 'sbatch: error: Batch job "
                      "submission failed: Requested node configuration is not available'."):
    """The wrapped report of a job error, as the plugin makes it; (lines said, reports)."""
    said, reports = [], []

    class Executor:
        def _report_job_error_threadsafe(self, job_info, msg):
            reports.append(msg)

    slurm.wrap_sbatch_refusal(Executor, said.append)
    slurm.wrap_sbatch_refusal(Executor, said.append)  # once only
    Executor()._report_job_error_threadsafe(SimpleNamespace(job=job), msg)
    return said, reports


def test_an_sbatch_refusal_that_cannot_change_is_not_retried():
    job = _Job(lambda attempt: 64000)
    said, reports = _refused(job)
    assert len(reports) == 1 and len(said) == 1
    assert said[0].startswith("slurm: sbatch refused rule train's job (SLURM sbatch failed.")
    assert job.attempt == job.restart_times + 1  # Snakemake's retry test: restart_times > attempt-1


def test_an_sbatch_refusal_is_retried_where_the_request_grows_with_attempt():
    job = _Job(lambda attempt: 3000 * attempt)
    said, reports = _refused(job)
    assert (said, len(reports), job.attempt) == ([], 1, 1)


def test_other_job_errors_keep_their_retries():
    job = _Job(lambda attempt: 64000)
    said, _ = _refused(job, msg="SLURM-job '12' failed, SLURM status is: 'CANCELLED'")
    assert (said, job.attempt) == ([], 1)


def test_the_plugin_reports_a_refusal_as_the_wrapper_expects():
    """The installed plugin's message for an sbatch refusal begins as the wrapper matches."""
    import inspect

    assert f'"{slurm.SBATCH_REFUSED}. "' in inspect.getsource(plugin.Executor.run_job)
    assert plugin.Executor._report_job_error_threadsafe  # the method the wrapper replaces


def test_the_request_check_on_snakemakes_own_jobs(tmp_path):
    """same_request_on_retry on real Snakemake jobs (its DAG of a two-rule Snakefile): a
    request that grows with `attempt` can change on a retry, a constant one cannot."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        DAGSettings,
        OutputSettings,
        RemoteExecutionSettings,
        ResourceSettings,
    )

    (tmp_path / "Snakefile").write_text(
        'rule grows:\n    output: "a"\n    resources: mem_mb=lambda wc, attempt: 1000 * attempt\n'
        '    shell: "touch {output}"\n'
        'rule fixed:\n    output: "b"\n    resources: mem_mb=64000\n    shell: "touch {output}"\n')
    with SnakemakeApi(OutputSettings()) as api:
        wf = api.workflow(resource_settings=ResourceSettings(), workdir=tmp_path,
                          snakefile=tmp_path / "Snakefile")
        dag = wf.dag(dag_settings=DAGSettings(targets={"a", "b"}))
        workflow = dag.workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=False, lock_warn_only=True)
        workflow._build_dag()
        workflow.remote_execution_settings = RemoteExecutionSettings()  # read by restart_times
        jobs = {job.rule.name: job for job in workflow.dag.jobs}
        for job in jobs.values():
            job.rule.restart_times = 2
        assert not slurm.same_request_on_retry(jobs["grows"])
        assert slurm.same_request_on_retry(jobs["fixed"])
