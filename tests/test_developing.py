"""docs/developing.md says what is true: its recipes (an algorithm, a DFPO transform, an
off-policy source, a benchmark, an engine, a preset), each one file or one entry in one file,
applied to a throwaway copy of the project give a registered loss that computes, a transform
that cancels as it claims, a one-step run of the new algorithm under the new source on the new
engine and benchmark, and a preset whose dry run plans those runs and evaluations; its preset
list is the presets folder; the engines are read from their own declarations."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "developing.md"
WORKFLOW = ["Snakefile", "rules", "config", "profiles", "envs", "scripts", "repro",
            "pyproject.toml"]
WHERE = re.compile(r"# (\S+?)(?:, (under|above) (.+))?$")
# What each recipe touches: one file (new, or one entry in it).
TOUCHES = {
    "An algorithm": {"repro/objectives/vanilla_pg.py"},
    "A DFPO transform": {"repro/objectives/transforms.py"},
    "An off-policy source": {"repro/training/sources.py"},
    "A benchmark": {"repro/benchmarks/specs/synth-aime-7.yaml"},
    "A training engine": {"repro/engines/native_copy.py"},
    "A preset": {"config/presets/my-study.yaml"},
}


def extending() -> str:
    return PAGE.read_text().split("\n## Extending\n", 1)[1]


def recipes() -> dict[str, list[tuple[str, str | None, str | None, str]]]:
    """Per "Extending" section, (path, "under"/"above"/None, anchor, text) of each code block,
    its first line naming where it goes."""
    out: dict[str, list[tuple[str, str | None, str | None, str]]] = {}
    for section in extending().split("\n### ")[1:]:
        title, _, text = section.partition("\n")
        for block in re.findall(r"```(?:python|yaml)\n(.*?)```", text, re.S):
            first, _, body = block.partition("\n")
            m = WHERE.fullmatch(first)
            assert m, f"a recipe block must start with '# PATH[, under|above ...]': {first!r}"
            out.setdefault(title, []).append((m.group(1), m.group(2), m.group(3), body))
    return out


def apply(copy: Path, path: str, how: str | None, anchor: str | None, text: str) -> None:
    target = copy / path
    if how is None:
        assert not target.exists(), f"the recipe would overwrite {path}"
        target.write_text(text)
        return
    lines = target.read_text().splitlines(keepends=True)
    if how == "under":
        at = lines.index(anchor + "\n") + 1
    else:
        at = next(i for i, line in enumerate(lines) if line.startswith(anchor))
    target.write_text("".join([*lines[:at], text, *lines[at:]]))


CHECK = """
import torch
from repro.benchmarks import get_benchmark
from repro.objectives import make_config, policy_loss
from repro.objectives.base import Minibatch
from repro.objectives.groups import Groups
from repro.objectives.registry import algorithm_names
from repro.objectives.transforms import apply_transform, cancelling_transforms

assert "vanilla_pg" in algorithm_names(), algorithm_names()
g = torch.Generator().manual_seed(0)
logp = (-torch.rand(8, 5, generator=g)).requires_grad_()
group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
adv = torch.randn(8, generator=g)
adv = adv - torch.stack([adv[group == i].mean() for i in group])
batch = Minibatch(logp, logp.detach() - 0.1, torch.ones(8, 5, dtype=torch.bool), adv, group)
for cfg in (make_config("vanilla_pg"), make_config("dfpo", transform="max_replace")):
    loss, _ = policy_loss(cfg, batch)
    loss.backward()
    assert torch.isfinite(loss) and logp.grad.abs().sum() > 0, cfg
    logp.grad = None
assert "max_replace" in cancelling_transforms()
a = torch.randn(8, generator=g, dtype=torch.float64)
a = a - torch.stack([a[group == i].mean() for i in group])
w = torch.rand(8, generator=g, dtype=torch.float64) + 0.5
wt = apply_transform("max_replace", w, a, Groups.from_ids(group))
for i in (0, 1):
    assert abs(float((a * wt)[group == i].sum())) < 1e-12
assert get_benchmark("synth-aime-7").n == 30
print("recipes ok")
"""
# One rollout step of the new algorithm under the new source, on the new engine, trained on the
# new benchmark's prompts (argv[1]: a tiny policy; argv[2]: the run folder).
SMOKE = """
import sys
from pathlib import Path
from repro.engines.registry import train
from repro.results import TRAIN_LOG, read_table
from repro.training.config import TrainConfig
from repro.training.sources import label_knobs

knobs = label_knobs({"source": "reuse_k2"})
cfg = TrainConfig(model=sys.argv[1], algorithm="vanilla_pg", engine="native_copy",
                  tasks={"synth-aime-7": 1.0}, steps=1, prompts_per_step=2, group_size=2,
                  max_new_tokens=8, probe_n=2, checkpoint_every=0, checkpoint_fractions=[1.0],
                  **knobs)
assert (cfg.minibatches, cfg.epochs) == (2, 4), knobs
train(cfg, Path(sys.argv[2]))
rows = read_table(Path(sys.argv[2]) / "train_log.parquet", TRAIN_LOG).to_pylist()
assert [r["step"] for r in rows] == [1], rows
print("smoke ok")
"""


def test_the_recipes_work_in_a_throwaway_copy(tmp_path, lock):
    """`lock`: conftest's data lock (a dry run reads no data)."""
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in WORKFLOW:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, copy / name)
    found = recipes()
    assert {title: {path for path, *_ in blocks} for title, blocks in found.items()} == TOUCHES
    for blocks in found.values():
        for recipe in blocks:
            apply(copy, *recipe)
    env = os.environ | {"PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    assert "recipes ok" in run("-c", CHECK)
    from repro.models import TinyModelConfig, build_tiny

    model, tok = build_tiny(TinyModelConfig(hidden_size=32, head_dim=8, intermediate_size=64))
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    assert "smoke ok" in run("-c", SMOKE, str(tmp_path / "tiny"), str(tmp_path / "run"))
    plan = run("-m", "snakemake", "-n", "-F", "-p", "--nolock", "--cores", "1", "--config",
               f"data_lock={lock}", "--configfile", "config/presets/my-study.yaml")
    for name in ("vanilla_pg", "dfpo_max", "gspo-reuse_k2"):
        assert f"results/my-study/runs/algo={name}/" in plan, name
    assert "synth-aime-7" in plan


def test_the_preset_list_is_every_preset():
    section = extending().split("The presets (`config/presets/`):", 1)[1].split("\n### ", 1)[0]
    listed = {name for line in section.splitlines() if line.startswith("- ")
              for name in re.findall(r"`([\w-]+)`", line.split(":", 1)[0])}
    assert listed == {p.stem for p in (ROOT / "config" / "presets").glob("*.yaml")}


def test_the_engines_are_read_from_their_declarations():
    """The engines' own `ENGINE` declarations are the one list: the schema spells no names, and
    TrainConfig's help is generated from the declarations."""
    from dataclasses import fields

    from repro.training.config import TrainConfig
    from repro.training.trainers import ENGINES

    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    assert "enum" not in str(schema["properties"]["train"])  # TrainConfig checks it at parse
    declaring = {p.stem for p in (ROOT / "repro" / "engines").glob("*.py")
                 if re.search(r"^ENGINE = \{", p.read_text(), re.MULTILINE)}
    assert set(ENGINES) == declaring  # each engine is named after its module here
    help_ = next(f.metadata["help"] for f in fields(TrainConfig) if f.name == "engine")
    assert all(f"'{name}'" in help_ for name in ENGINES), help_


def trail() -> str:
    page = PAGE.read_text()
    return page.split("\n## How a preset's value reaches the code", 1)[1].split("\n## ", 1)[0]


def test_every_step_of_the_transform_trail_names_code_that_exists():
    """Each `path: name` of the trail is a def, class or assignment of that file (or, in a rule
    file, a rule): a rename without the page fails here."""
    steps = re.findall(r"`((?:repro|rules)/[\w/]+\.(?:py|smk)): (\w+)`", " ".join(trail().split()))
    assert len(steps) >= 12, steps
    for path, name in steps:
        text = (ROOT / path).read_text()
        defined = rf"^\s*(?:def|class|rule) {name}\b|^{name}\b.*="
        assert re.search(defined, text, re.MULTILINE), f"{path}: {name}"
    for path in re.findall(r"`((?:rules|config)/[\w/.-]+\.(?:smk|yaml))`", trail()):
        assert (ROOT / path).exists() or "NAME" in path, path
