"""Diagnostics: shared nodes against a brute-force trie, metrics and curve stats by hand."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_groups import make_batch, run_updates, tiny_lm

from repro.diagnostics import (
    asym,
    cancellation_metrics,
    find_shared_nodes,
    freq_energy,
    jitter2,
    residual_full,
    shared_frac,
    steps_to_threshold,
)
from repro.objectives import make_config


def brute_force_nodes(tokens, mask, group):
    """{(group, prefix tuple incl. token): set(rows)} by explicit prefixes."""
    nodes: dict = {}
    for i in range(tokens.shape[0]):
        for t in range(tokens.shape[1]):
            if mask[i, t]:
                key = (int(group[i]), tuple(tokens[i, : t + 1].tolist()))
                nodes.setdefault(key, set()).add(i)
    return nodes


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(2, 8), t=st.integers(1, 8), vocab=st.integers(2, 4), data=st.data()
)
def test_shared_nodes_match_brute_force(b, t, vocab, data):
    tokens = torch.tensor(data.draw(st.lists(
        st.lists(st.integers(0, vocab - 1), min_size=t, max_size=t), min_size=b, max_size=b)))
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, t), min_size=b, max_size=b)))
    mask = torch.arange(t)[None, :] < lengths[:, None]
    group = torch.tensor(data.draw(st.lists(st.sampled_from([3, 8]), min_size=b, max_size=b)))
    if min(int((group == 3).sum()), int((group == 8).sum())) == 1:
        group = torch.full((b,), 3)
    nodes = find_shared_nodes(tokens, mask, group)
    truth = brute_force_nodes(tokens, mask, group)
    assert nodes.n_nodes == len(truth)
    got = {}
    for k in range(len(nodes.rows)):
        got.setdefault(int(nodes.node[k]), set()).add(int(nodes.rows[k]))
    assert sorted(map(sorted, got.values())) == sorted(map(sorted, truth.values()))
    sizes = {int(g): int((group == g).sum()) for g in group.unique()}
    for key, rows in truth.items():
        node_id = next(n for n, r in got.items() if r == rows and any(
            int(group[i]) == key[0] for i in r))
        assert bool(nodes.full[node_id]) == (len(rows) == sizes[key[0]])


def hand_case():
    # one group of 3; rows 0 and 1 share tokens 0..1, all three share token 0
    tokens = torch.tensor([[5, 6, 7], [5, 6, 8], [5, 9, 9]])
    mask = torch.ones(3, 3, dtype=torch.bool)
    group = torch.zeros(3, dtype=torch.long)
    adv = torch.tensor([1.0, 1.0, -2.0])
    return tokens, mask, group, adv


def test_metrics_by_hand_exchangeable_case():
    tokens, mask, group, adv = hand_case()
    coef = adv[:, None].expand(3, 3).clone()  # c = A_i everywhere: exchangeable
    nodes = find_shared_nodes(tokens, mask, group)
    assert asym(coef, adv, nodes) == 0.0
    assert residual_full(coef, nodes) == 0.0  # node (5): 1 + 1 - 2 = 0


def test_metrics_by_hand_broken_case():
    tokens, mask, group, adv = hand_case()
    coef = torch.tensor([[2.0, 2.0, 2.0], [1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    nodes = find_shared_nodes(tokens, mask, group)
    # kappa at node (5): (2, 1, 1): std sqrt(2/9), mean|k| 4/3 -> 0.35355; node (5,6): (2, 1):
    # std 0.5, mean 1.5 -> 1/3.  asym = mean of the two.
    expected = ((2 / 9) ** 0.5 / (4 / 3) + 0.5 / 1.5) / 2
    assert asym(coef, adv, nodes) == pytest.approx(expected, rel=1e-12)
    assert residual_full(coef, nodes) == pytest.approx(1 / 5)  # |2+1-2| / (2+1+2)


def test_shared_frac_by_hand():
    tokens, mask, group, _ = hand_case()
    # shared: (5) x3 and (5,6) x2 -> 5 of the 9 tokens; equal tokens after different first
    # tokens are different nodes
    assert shared_frac(find_shared_nodes(tokens, mask, group)) == pytest.approx(5 / 9)
    apart = torch.tensor([[1, 2, 3], [4, 2, 3]])
    assert shared_frac(find_shared_nodes(apart, mask[:2], group[:2])) == 0.0


def test_freq_energy_by_hand():
    tokens = torch.tensor([[1, 1, 1, 2], [1, 3, 4, 5], [6, 7, 8, 9]])
    mask = torch.ones(3, 4, dtype=torch.bool)
    coef = torch.zeros(3, 4)
    coef[0, 0] = 1.0  # token 1 (count 4): net +1
    coef[1, 0] = 0.5  # token 1 again: net +1.5
    coef[2, 3] = 2.0  # token 9 (count 1, loses the tie to 2..5): net +2
    # vocab 10 -> F = top max(5, ceil(0.1)) = {1, 2, 3, 4, 5}
    assert freq_energy(coef, tokens, mask, vocab_size=10) == pytest.approx(1.5**2 / (1.5**2 + 4))
    coef[2, 3] = 0.0
    assert freq_energy(coef, tokens, mask, vocab_size=10) == pytest.approx(1.0)
    assert freq_energy(torch.zeros(3, 4), tokens, mask, vocab_size=10) == 0.0


def test_freq_energy_excludes_rare_types():
    tokens = torch.tensor([[1] * 20 + [2] * 10 + [3, 4, 5, 6, 7, 8]])
    mask = torch.ones_like(tokens, dtype=torch.bool)
    coef = torch.zeros(tokens.shape)
    coef[0, 35] = 1.0  # token 8 is the 6th type by count: outside the top 5
    coef[0, 0] = 1.0  # token 1 is the most frequent
    assert freq_energy(coef, tokens, mask, vocab_size=100) == pytest.approx(0.5)


def test_jitter2_by_hand():
    assert jitter2([0.0, 1.0, 0.0, 1.0]) == pytest.approx(2.0)  # |0-2+0|, |1-0+1|
    assert jitter2([1.0, 2.0, 3.0, 4.0]) == 0.0  # a straight line has no jitter
    assert jitter2([1.0, 2.0]) == 0.0


def test_steps_to_threshold_by_hand():
    reward = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0]
    # moving averages over 5: 0.4 (ends at step 4), 0.6 (5), 0.76 (6), 0.88 (7)
    assert steps_to_threshold(reward, 0.7) == 6
    assert steps_to_threshold(reward, 0.7, x=[10 * i for i in range(8)]) == 60
    assert steps_to_threshold(reward, 0.95) is None


def test_metrics_separate_dfpo_from_gspo_on_a_real_lm():
    """After K updates: DFPO has asym = residual_full = 0 on its shared nodes, GSPO does not."""
    lm = tiny_lm()
    batch = make_batch(
        [{"prefix": 3, "lengths": [1, 4, 2, 6], "rewards": [1.0, 0.0, 0.0, 1.0]},
         {"prefix": 2, "lengths": [3, 5, 2], "rewards": [0.0, 1.0, 0.5]}],
        seed=3,
    )
    found = {}
    for name, kw in [("dfpo", {}), ("gspo", {"eps_low": 0.2, "eps_high": 0.2})]:
        out = run_updates(lm, make_config(name, **kw), batch)
        found[name] = cancellation_metrics(out.coef, batch.responses, batch.mask, batch.group,
                                           out.advantages, vocab_size=104)
    assert found["dfpo"]["asym"] < 1e-6 and found["dfpo"]["residual_full"] < 1e-6
    assert found["gspo"]["asym"] > 1e-2 and found["gspo"]["residual_full"] > 1e-2
