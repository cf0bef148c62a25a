"""`repro train`'s engines, read from the engine modules themselves: a module of repro/engines/
that assigns a literal `ENGINE = {...}` at its top level is an engine, so a new engine is its
module alone. The declarations are parsed (ast), not imported: the config sits below the
engines, and TrainConfig, the off-policy sources, the launch rules and the docs name engines
without importing torch or TRL (engines import repro.training, never the reverse).

A declaration holds `name` (TrainConfig.engine), `trainer` (the function of the module:
`fn(cfg, out, *, label, resume, fingerprint) -> out/final`), `launch` ("python": one process;
"accelerate": one process per GPU under `accelerate launch`, FSDP2), `env` (the `--sdm conda`
environment of its jobs, envs/<env>.yaml) and `help` (one line for the config reference).
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from pathlib import Path

ENGINE_PACKAGE = "repro.engines"  # the package whose modules declare engines (the code digest
# of a job that reads this module holds every module of it: repro.pipeline.sources)
LAUNCHES = ("python", "accelerate")


@dataclass(frozen=True)
class Engine:
    """One engine's declaration (the module docstring says what each field means)."""

    name: str
    trainer: str
    launch: str
    env: str
    help: str
    module: str  # its module's dotted name, from the file

    @property
    def import_path(self) -> str:
        return f"{self.module}:{self.trainer}"


def _declaration(path: Path) -> dict | None:
    """The literal `ENGINE = {...}` at the top level of `path`, or None."""
    for node in ast.parse(path.read_bytes(), filename=str(path)).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "ENGINE"):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise ValueError(f"{path}: ENGINE must be a literal dict") from None
            if not isinstance(value, dict):
                raise ValueError(f"{path}: ENGINE must be a literal dict, got {value!r}")
            return value
    return None


def declared_engines(folder: Path) -> dict[str, Engine]:
    """name -> Engine for every module of `folder` declaring one, in file-name order; a bad
    declaration is refused in one line naming the file and key."""
    fields = {f.name for f in dataclasses.fields(Engine)} - {"module"}  # module: from the file
    engines: dict[str, Engine] = {}
    for path in sorted(folder.glob("*.py")):
        decl = _declaration(path)
        if decl is None:
            continue
        if set(decl) != fields:
            raise ValueError(f"{path}: ENGINE keys must be {sorted(fields)}, got {sorted(decl)}")
        bad = [k for k in sorted(fields) if not isinstance(decl[k], str) or not decl[k]]
        if bad:
            raise ValueError(f"{path}: ENGINE.{bad[0]} must be a non-empty string")
        if decl["launch"] not in LAUNCHES:
            raise ValueError(f"{path}: ENGINE.launch must be one of {LAUNCHES}, "
                             f"got {decl['launch']!r}")
        if decl["name"] in engines:
            raise ValueError(f"{path}: ENGINE.name {decl['name']!r} is declared twice")
        engines[decl["name"]] = Engine(**decl, module=f"{ENGINE_PACKAGE}.{path.stem}")
    return engines


DECLARED: dict[str, Engine] = declared_engines(
    Path(__file__).resolve().parents[2].joinpath(*ENGINE_PACKAGE.split(".")))
TRAINERS: dict[str, str] = {name: e.import_path for name, e in DECLARED.items()}
ENGINES: tuple[str, ...] = tuple(DECLARED)
