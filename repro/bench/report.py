"""Printing of benchmark results as rich tables (kept apart from the measurements)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """Header and rows of the two tables: (loss head, loss rows, transform head, rows)."""
    loss_head = ["case", "median ms", "min ms", "x gspo", "x gspo (min)"]
    loss_rows = [
        [label, _ms(c["median_s"]), _ms(c["min_s"]), f"{c['ratio_to_gspo']:.3f}",
         f"{c['min_ratio_to_gspo']:.3f}"]
        for label, c in result["loss_backward"]["cases"].items()
    ]
    tr = result["transforms"]
    sizes = tr["n_groups"]
    tr_head = ["transform", "bisection", *[f"n={n} ms" for n in sizes], "largest/smallest"]
    tr_rows = []
    for name, c in tr["cases"].items():
        scaling = "-" if c["scaling"] is None else f"{c['scaling']:.2f}x"
        fired = "-"
        if "active_set_path" in c:
            fired = "yes" if any(c["active_set_path"].values()) else "no"
        tr_rows.append([name, fired, *[_ms(c["median_s"][n]) for n in sizes], scaling])
    return loss_head, loss_rows, tr_head, tr_rows


def print_objectives_report(result: dict[str, Any]) -> None:
    cfg, env, lb, tr = (
        result["config"], result["env"], result["loss_backward"], result["transforms"]
    )
    loss_title = (
        f"loss + backward, B={lb['shape'][0]} T={lb['shape'][1]} ({lb['tokens']:,} tokens, "
        f"{lb['groups']} groups of {cfg['group_size']}), median of {cfg['repeats']}"
    )
    tr_title = (
        f"transforms alone (apply_transform), groups of {tr['group_size']}, "
        f"median of {cfg['repeats']}; linear = {tr['size_ratio']:g}x"
    )
    header = (
        f"torch {env['torch']} on {env['device']} ({env['device_name']}, "
        f"{env['threads']} threads); ratios are side by side in this run"
    )
    loss_head, loss_rows, tr_head, tr_rows = _rows(result)
    note = (
        "x gspo: ratio of medians (the acceptance); x gspo (min): ratio of the fastest rounds, "
        "least disturbed by other load on the machine"
    )
    verdicts = [
        f"{'PASS' if c['passed'] else 'FAIL'}  {c['name']}: {c['value']:.3f}"
        + (f" ({c['note']})" if "note" in c else "")
        for c in result["acceptance"]
    ]
    console = Console()
    console.print(header, highlight=False)
    for title, head, rows in ((loss_title, loss_head, loss_rows), (tr_title, tr_head, tr_rows)):
        console.print(f"\n{title}", highlight=False)
        table = Table()
        for i, h in enumerate(head):
            table.add_column(h, justify="left" if i == 0 else "right")
        for r in rows:
            table.add_row(*map(escape, r))
        console.print(table)
    console.print(note, highlight=False)
    for v in verdicts:
        console.print(escape(v), style="green" if v.startswith("PASS") else "red", highlight=False)


STAGE_LABELS = {
    "generate": "rollout: generate (HF engine)",
    "grading": "rollout: grading",
    "old_logprobs": "rollout: old log-probs, batching, advantages",
    "update": "update (K minibatches, AdamW)",
    "diagnostics": "  of which diagnostics (timed alone)",
    "probes": "probes",
    "checkpoint": "checkpoint",
}


def print_rl_step_report(result: dict[str, Any]) -> None:
    """Per-stage medians of one RL step, the baselines beside them, the two ratios."""
    cfg, train, env = result["config"], result["train"], result["env"]
    console = Console()
    console.print(
        f"one native RL step: {train['algorithm']}, P={train['prompts_per_step']} "
        f"G={train['group_size']} K={train['minibatches']} max_new_tokens="
        f"{train['max_new_tokens']}; median of {cfg['repeats']} rounds; torch {env['torch']}, "
        f"{env['threads']} threads; loop and baselines alternate A B / B A",
        highlight=False,
    )
    table = Table()
    for i, head in enumerate(("stage", "median ms", "share of step")):
        table.add_column(head, justify="left" if i == 0 else "right")
    for name, seconds in result["stages_s"].items():
        table.add_row(STAGE_LABELS[name], _ms(seconds), f"{result['shares'][name]:.1%}")
    table.add_row("step (rollout + update + probes + checkpoint)", _ms(result["step_s"]), "")
    table.add_row("bare model.generate, same prompts", _ms(result["bare_s"]["generate"]), "")
    table.add_row("bare forward, no grad, same batch", _ms(result["bare_s"]["forward"]), "")
    table.add_row("bare forward + backward, same minibatches", _ms(result["bare_s"]["fwd_bwd"]), "")
    console.print(table)
    rates = result["tokens_per_s"]
    console.print(
        f"tokens/s (rows x decode steps): rollout {rates['rollout']:,.0f}, engine generate "
        f"{rates['engine_generate']:,.0f}, bare generate {rates['bare_generate']:,.0f}; kept "
        f"tokens/s: rollout {rates['rollout_kept']:,.0f}, bare {rates['bare_generate_kept']:,.0f}",
        highlight=False,
    )
    ratios = ", ".join(f"{k} {v:.3f}" for k, v in result["ratios"].items())
    console.print(f"ratios of medians: {ratios}", highlight=False)
    for check in result["acceptance"]:
        verdict = "PASS" if check["passed"] else "FAIL"
        console.print(f"{verdict}  {check['name']}: {check['value']:.3f}",
                      style="green" if check["passed"] else "red", highlight=False)
