"""Parse-time check of a `models.*.config` block (a config.json's fields, declared in a preset
for the planner and for `source: init` builds) with the tiny catalogue's rules.

A preset's config reaches transformers only on the GPU job: a key its config class does not know
(`num_experts` on a dense Qwen3) is kept as an ignored attribute, and a top-k above the experts
or a Qwen3-Next layout without a full-attention layer pass the config and fail at the first
forward. `check_config_fields` refuses each with one line naming the key, reusing
`TinyModelConfig`'s rules (`check_architecture_keys`, `check_moe_layout`) so the two agree.

The workflow's parse imports neither torch nor transformers (tests/test_pipeline_jobs.py), and
importing transformers' config classes loads torch (~2.5 s). So the fields a config class knows
are read from the installed transformers' source with `ast`: its dataclass fields and theirs of
`PreTrainedConfig`, its `attribute_map`, and the legacy keys its `__post_init__` (and the base's,
and the RoPE conversion) pops from `kwargs` (`torch_dtype`, `rope_theta`,
`full_attention_interval`). tests/test_preset_model_config.py checks this against the classes.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Any

from repro.models.tiny_config import ARCHITECTURES, check_architecture_keys, check_moe_layout

_KWARG_READS = ("pop", "get", "setdefault")


@functools.cache
def _transformers_root() -> Path:
    spec = importlib.util.find_spec("transformers")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("transformers is not installed: cannot check models.*.config")
    return Path(spec.submodule_search_locations[0])


def _class(path: Path, match: Any) -> ast.ClassDef:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and match(node):
            return node
    raise ValueError(f"no config class found in {path}")


def _model_type_is(name: str) -> Any:
    def match(node: ast.ClassDef) -> bool:
        return any(isinstance(s, ast.Assign) and [getattr(t, "id", None) for t in s.targets]
                   == ["model_type"] and getattr(s.value, "value", None) == name
                   for s in node.body)
    return match


def _fields(node: ast.ClassDef) -> dict[str, Any]:
    """Annotated class-level fields (the dataclass's) and their literal defaults (None if not a
    literal), plus the `attribute_map` aliases."""
    found: dict[str, Any] = {}
    for s in node.body:
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
            if "ClassVar" in ast.unparse(s.annotation):
                continue
            try:
                found[s.target.id] = ast.literal_eval(s.value) if s.value else None
            except ValueError:
                found[s.target.id] = None
        target = s.target if isinstance(s, ast.AnnAssign) else (
            s.targets[0] if isinstance(s, ast.Assign) else None)
        if getattr(target, "id", None) == "attribute_map" and isinstance(s.value, ast.Dict):
            found |= dict.fromkeys(k.value for k in s.value.keys if isinstance(k, ast.Constant))
    return found


def _consumed(node: ast.ClassDef, methods: tuple[str, ...]) -> set[str]:
    """Keys that `methods` of `node` read from `kwargs` (`kwargs.pop("torch_dtype", None)`)."""
    keys = set()
    for method in node.body:
        if isinstance(method, ast.FunctionDef) and method.name in methods:
            for call in ast.walk(method):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr in _KWARG_READS
                        and getattr(call.func.value, "id", None) == "kwargs" and call.args
                        and isinstance(call.args[0], ast.Constant)):
                    keys.add(call.args[0].value)
    return keys


@functools.cache
def known_fields(model_type: str) -> tuple[dict[str, Any], set[str]]:
    """(fields with literal defaults, legacy keys consumed) of transformers' config class for
    `model_type` (one of `ARCHITECTURES`), read from its source."""
    root = _transformers_root()
    own = _class(root / "models" / model_type / f"configuration_{model_type}.py",
                 _model_type_is(model_type))
    base = _class(root / "configuration_utils.py", lambda n: n.name == "PreTrainedConfig")
    rope = _class(root / "modeling_rope_utils.py",
                  lambda n: n.name == "RotaryEmbeddingConfigMixin")
    consumed = (_consumed(own, ("__post_init__",)) | _consumed(base, ("__post_init__",))
                | _consumed(rope, ("convert_rope_params_to_dict",)))
    return _fields(base) | _fields(own), consumed


def check_config_fields(fields: dict[str, Any], where: str) -> None:
    """Refuse `fields` (config.json's, `model_type` included) that transformers' config class for
    that architecture does not know or that cannot run; `where` (e.g. `config
    models.qwen3-32b.config`) prefixes the one-line error. A model type other than
    `ARCHITECTURES` is left to the planner, which names the ones it knows."""
    fields = dict(fields)
    model_type = fields.pop("model_type", None)
    if model_type not in ARCHITECTURES:
        return
    check_architecture_keys(model_type, fields, where)
    known, consumed = known_fields(model_type)
    unknown = [k for k in fields if k not in known and k not in consumed]
    if model_type == "qwen3_next" and "layer_types" in fields:
        unknown += ["full_attention_interval"] * ("full_attention_interval" in fields)
    if unknown:  # transformers would keep it as an attribute that no module reads
        raise ValueError(f"{where}.{unknown[0]} is not a field of transformers' config class for "
                         f"{model_type}: the model would ignore it")
    values = {k: fields.get(k, known.get(k)) for k in ("num_experts", "num_experts_per_tok")}
    if model_type == "qwen3_next":  # the layout transformers derives: layer_types, or interval
        values |= {"num_hidden_layers": fields.get("num_hidden_layers",
                                                   known.get("num_hidden_layers")),
                   "full_attention_interval": fields.get("full_attention_interval", 4),
                   "layer_types": fields.get("layer_types")}
    check_moe_layout(values, where)
