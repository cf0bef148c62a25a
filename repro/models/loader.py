"""The single entry point for loading a causal LM and its tokenizer.

Tiny test models (saved by `repro.models.build_tiny`) and real checkpoints
(local directories or Hugging Face Hub ids) go through the same
``Auto*.from_pretrained`` calls, so code tested on the tiny model runs
unchanged on a real one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from accelerate import init_empty_weights
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

# "owner/name" with the characters the Hub allows; anything else must be a local path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_TRUE = {"1", "ON", "YES", "TRUE"}

# Trained weights (and so AdamW's state) are float32 whatever the checkpoint stores: in bf16,
# lr 1e-6 updates of weights near 0.02 round to zero (bf16 spacing there is ~1.2e-4). Low-
# precision compute is the trainer's business (FSDP2's MixedPrecisionPolicy, issue 17).
MASTER_DTYPE = torch.float32


def _offline() -> bool:
    """Read offline mode at call time.

    ``huggingface_hub`` reads ``HF_HUB_OFFLINE`` once at import, so setting it
    later (e.g. in a test) would otherwise be ignored and trigger slow network retries.
    """
    return any(os.environ.get(v, "").upper() in _TRUE for v in _OFFLINE_VARS)


def _source(path_or_hub_id: str | Path) -> tuple[str, bool, bool]:
    """(source, is a local path, Hub lookups must stay in the local cache)."""
    source = str(path_or_hub_id)
    is_local = Path(source).exists()
    if not is_local and not _HUB_ID.match(source):
        raise FileNotFoundError(f"Model path does not exist: {source!r}")
    return source, is_local, not is_local and _offline()


@contextmanager
def _hub_errors(source: str, is_local: bool) -> Iterator[None]:
    """A Hub id that cannot be fetched -> one RuntimeError saying what to do."""
    try:
        yield
    except OSError as err:
        if is_local:
            raise
        raise RuntimeError(
            f"Could not load model {source!r} from the Hugging Face Hub or its local cache "
            "(offline, not cached, or no such repo; no local directory of that name exists "
            "either). "
            f"Download it first (e.g. `hf download {source}`) or pass a local path."
        ) from err


def load(
    path_or_hub_id: str | Path,
    *,
    dtype: torch.dtype | str = "auto",
    device: str = "cpu",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` from a local directory or a Hub id, model in eval mode.

    ``dtype="auto"`` keeps the dtype recorded in the checkpoint (float32 for
    tiny models, bf16 for Qwen3): right for inference, wrong for training weights, which
    load as ``MASTER_DTYPE``. The tokenizer is returned exactly as saved, including its
    ``padding_side``; code that batches prompts for generation must set
    left padding itself.

    Raises:
        FileNotFoundError: ``path_or_hub_id`` is neither an existing path nor an
            ``owner/name`` Hub id.
        RuntimeError: a Hub id could not be fetched (offline, not cached, or nonexistent).
    """
    source, is_local, local_only = _source(path_or_hub_id)
    with _hub_errors(source, is_local):
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, local_files_only=local_only
        )
    model.to(device)
    model.eval()
    return model, tokenizer


def checkpoint_dtype(path_or_hub_id: str | Path) -> str:
    """The dtype a checkpoint records in its config.json (``dtype``, or the older
    ``torch_dtype``; float32 when it records none, transformers' own default): the dtype a
    user expects the run's exported policies in."""
    source, is_local, local_only = _source(path_or_hub_id)
    with _hub_errors(source, is_local):
        config = AutoConfig.from_pretrained(source, local_files_only=local_only)
    dtype = getattr(config, "dtype", None) or "float32"
    return str(dtype).removeprefix("torch.")


def load_for_sharding(
    path_or_hub_id: str | Path,
    *,
    main_process: bool,
    dtype: torch.dtype | str = "auto",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`load` for FSDP2 with accelerate's ``cpu_ram_efficient_loading``: only the main process
    holds the weights (on CPU); every other process gets the same architecture with its
    parameters on the meta device, which accelerate's prepare fills shard by shard from the
    main process's copy (`fsdp2_load_full_state_dict`).

    Why not transformers' own path: in transformers 5.17, ``from_pretrained`` under
    ``FSDP_CPU_RAM_EFFICIENT_LOADING`` still reads every weight on every rank (only missing
    keys stay empty), i.e. a full CPU copy per process (8 x 160 GB per node for an 80B
    model). Buffers (e.g. RoPE frequencies, not in the state dict) are real on every process.
    ``dtype="auto"``: the dtype recorded in ``config.json``, on every process (a mismatch would
    be cast silently by the broadcast).
    """
    if main_process:
        return load(path_or_hub_id, dtype=dtype)
    source, is_local, local_only = _source(path_or_hub_id)
    with _hub_errors(source, is_local):
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
        config = AutoConfig.from_pretrained(source, local_files_only=local_only)
        try:
            generation = GenerationConfig.from_pretrained(source, local_files_only=local_only)
        except OSError:  # no generation_config.json: from_pretrained's default too
            generation = None
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(
            config, **({} if dtype == "auto" else {"dtype": dtype}))
    model.tie_weights()  # each parameter was re-registered on meta, which unties them
    if dtype != "auto":  # from_pretrained records it; from_config does not before transformers
        model.config.dtype = dtype  # ~5.2x, so the processes' configs would disagree
    if generation is not None:
        model.generation_config = generation
    model.eval()
    return model, tokenizer
