"""The experiment statistics are right: shown by simulation, with scores of known truth.

Each simulated experiment is a frame of `source_run_id, variant, repeat, score` (what
`Experiment.frame` holds) built with numpy from a seeded generator, summarized by
`kx.summarize`: no workflow, no model call, hundreds of experiments in seconds, the same
figures every run. The figures are printed (`pytest -s`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from kassette import explore as kx
from kassette.explore._sequential import MIN_PAIRS

EXPERIMENTS = 1000


def _frame(
    rng: np.random.Generator,
    *,
    sources: int,
    repeats: int,
    effect: float,
    clusters: int | None = None,
    icc: float = 0.0,
) -> pd.DataFrame:
    """Scores of a baseline `a` and a variant `b` on `sources` items: an item effect shared by
    both arms, the variant's `effect`, noise per repeat; with `clusters`, items share a cluster
    whose effect on the *difference* has variance `icc` (and the item's own, 1 - icc)."""
    item = rng.normal(0, 1, sources)
    if clusters:
        cluster = np.arange(sources) % clusters
        shift = rng.normal(0, math.sqrt(icc), clusters)[cluster] + rng.normal(
            0, math.sqrt(1 - icc), sources
        )
    else:
        cluster = np.zeros(sources, dtype=int)
        shift = np.zeros(sources)
    rows = []
    for variant, delta in (("a", 0.0), ("b", effect)):
        for repeat in range(repeats):
            noise = rng.normal(0, 1, sources)
            score = item + delta + (shift if variant == "b" else 0.0) + noise
            rows.append(
                pd.DataFrame(
                    {
                        "source_run_id": np.arange(sources),
                        "variant": variant,
                        "repeat": repeat,
                        "score": score,
                        "cluster": cluster,
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def test_the_95_percent_interval_covers_the_true_difference_93_to_97_percent_of_the_time() -> None:
    rng = np.random.default_rng(27)
    effect = 0.3
    covered = 0
    for _ in range(EXPERIMENTS):
        row = kx.summarize(_frame(rng, sources=30, repeats=3, effect=effect), baseline="a").iloc[0]
        assert row.pairs == 30  # repeats averaged within a source run: 30 pairs, not 90
        covered += row.ci_low <= effect <= row.ci_high
    coverage = covered / EXPERIMENTS
    print(f"\ncoverage of the 95% interval over {EXPERIMENTS} experiments: {coverage:.1%}")
    assert 0.93 <= coverage <= 0.97


def test_clustered_items_without_effect_cluster_keeps_false_positives_under_7_percent() -> None:
    rng = np.random.default_rng(7)
    runs = 400
    clustered = naive = 0
    for _ in range(runs):
        frame = _frame(rng, sources=200, repeats=1, effect=0.0, clusters=10, icc=0.7)
        clustered += kx.summarize(frame, baseline="a", cluster="cluster").iloc[0].p_value < 0.05
        naive += kx.summarize(frame, baseline="a").iloc[0].p_value < 0.05
    print(
        f"\nICC 0.7, 10 clusters of 20, no effect, {runs} experiments: false positives "
        f"{clustered / runs:.1%} with cluster=, {naive / runs:.1%} ignoring the clusters"
    )
    assert clustered / runs <= 0.07
    assert naive / runs > 0.20


def test_boolean_scores_use_exact_mcnemar_equal_to_binomtest_on_the_discordant_pairs() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        sources = int(rng.integers(10, 80))
        base = rng.random(sources) < 0.5
        variant = np.where(rng.random(sources) < 0.3, ~base, base)
        frame = pd.DataFrame(
            {
                "source_run_id": np.tile(np.arange(sources), 2),
                "variant": ["control"] * sources + ["new"] * sources,
                "repeat": 0,
                "score": pd.array(np.concatenate([base, variant]), dtype="boolean"),
            }
        )
        row = kx.summarize(frame, baseline="control").iloc[0]
        gained, lost = int((variant & ~base).sum()), int((base & ~variant).sum())
        expected = 1.0 if gained + lost == 0 else stats.binomtest(gained, gained + lost).pvalue
        assert row.test == "exact McNemar"
        assert row.p_value == pytest.approx(expected, rel=1e-12)
        assert (row.wins, row.losses, row.ties) == (gained, lost, sources - gained - lost)
        assert row.difference == pytest.approx((gained - lost) / sources)
        assert row.ci_low <= row.difference <= row.ci_high
        assert row.ci_low >= -1 and row.ci_high <= 1


def test_the_interval_on_the_difference_in_pass_rates_covers_the_truth() -> None:
    rng = np.random.default_rng(11)
    covered, runs = 0, 500
    for _ in range(runs):
        base = rng.random(60) < 0.6
        variant = np.where(rng.random(60) < 0.25, rng.random(60) < 0.8, base)
        truth = 0.25 * (0.8 - 0.6)
        frame = pd.DataFrame(
            {
                "source_run_id": np.tile(np.arange(60), 2),
                "variant": ["a"] * 60 + ["b"] * 60,
                "score": pd.array(np.concatenate([base, variant]), dtype="boolean"),
            }
        )
        row = kx.summarize(frame, baseline="a").iloc[0]
        covered += row.ci_low <= truth <= row.ci_high
    print(f"\ncoverage of the Agresti-Min interval on pass rates: {covered / runs:.1%}")
    assert 0.93 <= covered / runs <= 0.98


def test_holm_adjusts_across_variants_as_statsmodels_does() -> None:
    rng = np.random.default_rng(5)
    frames = [_frame(rng, sources=40, repeats=1, effect=e) for e in (0.0, 0.2, 0.6)]
    frame = frames[0][frames[0]["variant"] == "a"]
    parts = [frame] + [f[f["variant"] == "b"].assign(variant=f"v{i}") for i, f in enumerate(frames)]
    summary = kx.summarize(pd.concat(parts), baseline="a")
    assert list(summary["variant"]) == ["v0", "v1", "v2"]
    expected = multipletests(summary["p_value"], method="holm")[1]
    assert np.allclose(summary["p_holm"], expected)
    assert (summary["p_holm"] >= summary["p_value"]).all()


def test_power_runs_needed_gives_the_promised_power() -> None:
    rng = np.random.default_rng(13)
    pilot = _frame(rng, sources=40, repeats=1, effect=0.5)
    from kassette.explore._stats import power_table

    row = power_table(pilot, baseline="a", effect=0.5).iloc[0]
    needed = int(row.runs_needed)
    assert row.detectable_effect > 0
    hits = sum(
        kx.summarize(_frame(rng, sources=needed, repeats=1, effect=0.5), baseline="a")
        .iloc[0]
        .p_value
        < 0.05
        for _ in range(400)
    )
    print(f"\nruns_needed for 0.5: {needed}; power at that size: {hits / 400:.1%}")
    assert 0.68 <= hits / 400 <= 0.92  # 0.8 promised, from a pilot's estimated spread


def test_sequential_stop_under_no_effect_decides_at_most_alpha_while_peeking_after_every_pair() -> (
    None
):
    rng = np.random.default_rng(21)
    rule = kx.decided(alpha=0.05)
    runs, planned = 2000, 200
    for name, draw in (
        ("normal", lambda: rng.normal(0, 1, planned)),
        ("heavy tails (t3)", lambda: rng.standard_t(3, planned)),
        ("pass/fail", lambda: (rng.random(planned) < 0.5) * 1.0 - (rng.random(planned) < 0.5)),
    ):
        wrong = sum(rule.first_decision(draw(), planned, 1) > 0 for _ in range(runs))
        rate = wrong / runs
        error = 2 * math.sqrt(0.05 * 0.95 / runs)
        print(f"\nsequential, no effect, {name}: decided in {rate:.1%} of {runs} (alpha 5%)")
        assert rate <= 0.05 + error
    # the plain t test, peeked at after every pair, is what the sequence protects against
    peeked = 0
    for _ in range(500):
        d = rng.normal(0, 1, planned)
        peeked += any(
            stats.ttest_1samp(d[:n], 0).pvalue < 0.05 for n in range(MIN_PAIRS, planned + 1, 5)
        )
    print(f"a t test peeked at every 5 pairs: decided in {peeked / 500:.1%}")
    assert peeked / 500 > 0.15


def test_sequential_stop_saves_branches_on_a_real_effect() -> None:
    rng = np.random.default_rng(34)
    rule = kx.decided(alpha=0.05)
    planned, runs = 200, 500
    after = [
        rule.first_decision(rng.normal(0.5, 1, planned), planned, 1) or planned for _ in range(runs)
    ]
    saved = 1 - np.mean(after) / planned
    print(
        f"\nsequential, effect 0.5 sd, 200 planned: decided after {np.mean(after):.0f} runs on "
        f"average (median {np.median(after):.0f}): {saved:.0%} of branches not run"
    )
    assert saved > 0.5


def test_summarize_over_repeats_pairs_by_source_and_drops_missing_scores() -> None:
    frame = pd.DataFrame(
        {
            "source_run_id": ["s1", "s1", "s1", "s1", "s2", "s2", "s3"],
            "variant": ["base", "new", "new", "new", "base", "new", "base"],
            "repeat": [0, 0, 1, 2, 0, 0, 0],
            "score": [1.0, 2.0, 4.0, math.nan, 3.0, 2.0, 5.0],
            "cost_usd": [0.0, 0.1, 0.2, 0.3, 0.0, 0.1, 0.0],
        }
    )
    row = kx.summarize(frame, baseline="base").iloc[0]
    assert row.pairs == 2  # s3 has no variant score
    assert row["mean"] == pytest.approx((3.0 + 2.0) / 2)  # s1's repeats averaged (the NaN left out)
    assert row.difference == pytest.approx(((3.0 - 1.0) + (2.0 - 3.0)) / 2)
    assert (row.wins, row.ties, row.losses) == (1, 0, 1)
    assert row.cost_usd == pytest.approx(0.7)
    with pytest.raises(ValueError, match="baseline 'nope'"):
        kx.summarize(frame, baseline="nope")
