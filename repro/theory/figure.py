"""Figure of `repro theory`: template KL, the residual-only tax and |log-odds drift|.

Lines are the mean over seeds, the band the min-max over seeds. Agg backend and TrueType
(Type 42) fonts so that the PDF embeds no Type 3 fonts (publication requirement).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from repro.atomic import atomic_file

STYLES = ["-", "--", "-.", ":"]  # overlapping curves (grpo == grpo_fix when nothing clips)
PANELS = (
    ("kl_template_cum", "cumulative KL at template contexts", "Template KL (all causes)"),
    ("kl_tax_cum", "cumulative KL of the residual step", "Learning tax (Prop. 3.1)"),
    ("abs_drift", "|log P(A)/P(B) - initial|", "Log-odds drift (Cor. 3.2)"),
)


def plot_theory(table: pa.Table, out: Path) -> None:
    """Write out/theory.png and out/theory.pdf (each atomically)."""
    table = table.append_column("abs_drift", pc.abs(table["logodds_drift"]))
    with plt.rc_context({"pdf.fonttype": 42, "ps.fonttype": 42}):
        fig, axes = plt.subplots(1, len(PANELS), figsize=(14, 3.8), constrained_layout=True)
        for ax, (column, ylabel, title) in zip(axes, PANELS, strict=True):
            labels = dict.fromkeys(table["algorithm"].to_pylist())
            for label, style in zip(labels, STYLES * len(labels), strict=False):
                steps, curves = _curves(table.filter(pc.equal(table["algorithm"], label)), column)
                (line,) = ax.plot(steps, curves.mean(0), style, label=label)
                ax.fill_between(steps, curves.min(0), curves.max(0), color=line.get_color(),
                                alpha=0.15, linewidth=0)
            ax.set(xlabel="step (rollout batch)", ylabel=ylabel, title=title)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        for ext in ("png", "pdf"):
            atomic_file(out / f"theory.{ext}", lambda tmp, ext=ext: fig.savefig(tmp, format=ext))
        plt.close(fig)


def _curves(rows: pa.Table, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Steps [S] and values [n_seeds, S] of one algorithm (rows sorted by seed then step)."""
    rows = rows.sort_by([("seed", "ascending"), ("step", "ascending")])
    steps = np.unique(rows["step"].to_numpy())
    return steps, rows[column].to_numpy().reshape(-1, steps.size)
