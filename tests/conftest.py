"""Fixtures shared by the workflow and launch tests, and the suite's order."""

from __future__ import annotations

import os

import pytest
import yaml

if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # One core a worker, for torch in the worker and in the processes its tests start: with
    # torch's default (a thread per core) in each of two workers, OpenMP threads spin against
    # each other (a 23 s RL test took 118 s beside the smoke runs). Before any torch import.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def lock(tmp_path_factory) -> str:
    """A data lock as `repro data pin` writes it, pinning every LCB shard (digits made up: a
    dry run reads no data)."""
    path = tmp_path_factory.mktemp("lock") / "data.lock.yaml"
    shards = ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]
    path.write_text(yaml.safe_dump({"data_dir": "hub-data", "datasets": {
        "livecodebench/code_generation_lite": {
            "revision": "main", "resolved_revision": None,
            "sha256": {name: f"{i:064x}" for i, name in enumerate(shards)}}}}))
    return str(path)


@pytest.fixture
def hashed(monkeypatch) -> None:
    """Rewards from a hash of each response (train_helpers.hashed_rewards) instead of grading:
    a short run of an untrained policy gets groups with reward spread, so its losses act."""
    from train_helpers import hashed_rewards

    from repro.training import rollout

    monkeypatch.setattr(rollout.Rewarder, "__call__", hashed_rewards)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end (`slow`) tests first, each group in its collected order: under pytest-xdist
    (pyproject's `-n auto --dist worksteal`) the workers then start on the long tests and share
    out the ~900 short ones at the end, instead of one worker finishing a long test alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
