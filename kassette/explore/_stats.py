"""Paired statistics for experiments: is a variant better than the baseline, by how much, how sure.

An experiment's scores are paired by construction: every variant and the baseline are run on
the same source runs. The unit of analysis is therefore the source run (Miller 2024, "Adding
Error Bars to Evals", arXiv 2411.00640): repeats are averaged within a source run first, then
each variant is compared with the baseline through the per-source differences:

- numbers: a paired t interval and test on the differences (`scipy.stats.ttest_1samp`);
- `cluster=`: where source runs share something (a task, a customer), the mean difference is
  an OLS intercept with cluster-robust errors and a t with G-1 degrees of freedom
  (statsmodels, `cov_type="cluster"`), so that correlated items do not count as independent;
- booleans with one repeat: an exact McNemar test, which is `scipy.stats.binomtest` on the
  discordant pairs, and an Agresti-Min interval on the difference in proportions (Agresti and
  Min 2005, "Simple improved confidence intervals for comparing matched proportions": the
  Wald interval with half a pair added to each cell);
- across variants, Holm's correction (the step-down of `statsmodels.stats.multitest`).

`power` answers "what effect can these many runs detect?" and "how many runs does effect d
need?" with statsmodels' power of the paired t test. scipy and statsmodels are the `stats`
extra, imported when first used.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kassette._extras import install_hint, requires

__all__ = ["SUMMARY_COLUMNS", "power_table", "summarize"]

SUMMARY_COLUMNS = [
    "variant",
    "pairs",
    "baseline_mean",
    "mean",
    "difference",
    "ci_low",
    "ci_high",
    "p_value",
    "p_holm",
    "wins",
    "ties",
    "losses",
    "test",
    "cost_usd",
]
POWER_COLUMNS = ["variant", "pairs", "sd", "effect", "detectable_effect", "runs_needed"]
PAIRED_T = "paired t"
CLUSTER_T = "cluster-robust t"
MCNEMAR = "exact McNemar"


def require_stats(*, imported: bool = True) -> None:
    """Raise an ImportError naming the `stats` extra unless scipy and statsmodels import
    (with `imported=False`, unless they are installed: importing scipy.stats takes a second)."""
    if not imported:
        from importlib.util import find_spec

        for name in ("scipy", "statsmodels"):
            if find_spec(name) is None:
                raise ImportError(install_hint("kx.experiment", name), name=name)
        return
    with requires("experiment statistics"):
        import scipy.stats  # noqa: F401
        import statsmodels  # noqa: F401  (not statsmodels.api: seconds to import)


def is_boolean(scores: pd.Series) -> bool:
    """Whether scores are pass/fail: a boolean dtype, or Python bools only."""
    if pd.api.types.is_bool_dtype(scores.dtype):
        return True
    present = scores.dropna()
    return scores.dtype == object and len(present) > 0 and all(type(s) is bool for s in present)


def paired_means(
    scores: pd.DataFrame, cluster: str | None = None
) -> tuple[pd.DataFrame, pd.Series | None]:
    """Each source run's mean score per variant (a source per row, a variant per column),
    repeats averaged within the source run; and each source run's cluster, if asked."""
    present = scores[scores["score"].notna()]
    values = present["score"].astype("float64")
    grouped = values.groupby([present["source_run_id"], present["variant"]], sort=False).mean()
    wide = grouped.unstack("variant")
    clusters = None
    if cluster is not None:
        clusters = scores.groupby("source_run_id", sort=False)[cluster].first().reindex(wide.index)
    return wide, clusters


def summarize(
    scores: pd.DataFrame,
    *,
    baseline: str,
    cluster: str | None = None,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Compare every variant of `scores` with `baseline`: a row per other variant.

    `scores` has a row per scored branch: `source_run_id`, `variant`, `repeat`, `score`
    (numbers, or booleans for pass/fail), and optionally `cost_usd` and the `cluster` column.
    Rows with a missing score are left out. Columns: `variant`, `pairs` (source runs scored in
    both arms), `baseline_mean` and `mean` over those pairs, `difference` (variant minus
    baseline) with its `1 - alpha` interval `ci_low`..`ci_high`, `p_value` (two-sided),
    `p_holm` (Holm-adjusted across the variants), `wins`/`ties`/`losses` (source runs where
    the variant scored higher, the same, lower), `test` and `cost_usd` (the variant's rows'
    sum). See the module's doc for the tests.
    """
    require_stats()
    for column in ("source_run_id", "variant", "score"):
        if column not in scores.columns:
            raise ValueError(f"summarize needs a {column!r} column, not {list(scores.columns)}")
    if cluster is not None and cluster not in scores.columns:
        raise ValueError(f"cluster column {cluster!r} is not in the scores frame")
    boolean = is_boolean(scores["score"])
    wide, clusters = paired_means(scores, cluster)
    if baseline not in wide.columns:
        raise ValueError(f"baseline {baseline!r} has no scores (variants: {list(wide.columns)})")
    variants = [v for v in pd.unique(scores["variant"]) if v != baseline and v in wide.columns]
    rows = []
    for variant in variants:
        pair = wide[[baseline, variant]].dropna()
        row = _compare(
            pair[baseline].to_numpy(),
            pair[variant].to_numpy(),
            boolean,
            alpha,
            None if clusters is None else clusters.reindex(pair.index).to_numpy(),
        )
        row["variant"] = variant
        row["cost_usd"] = _cost(scores, variant)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    tested = frame["p_value"].notna().to_numpy()
    frame["p_holm"] = np.nan
    if tested.any():
        frame.loc[tested, "p_holm"] = holm(frame.loc[tested, "p_value"].to_numpy())
    for column in ("pairs", "wins", "ties", "losses"):
        frame[column] = frame[column].astype("int64")
    return frame


def _compare(
    base: np.ndarray,
    variant: np.ndarray,
    boolean: bool,
    alpha: float,
    clusters: np.ndarray | None,
) -> dict[str, Any]:
    """One variant against the baseline, from the per-source means of both arms."""
    differences = variant - base
    pairs = len(differences)
    row: dict[str, Any] = {
        "pairs": pairs,
        "baseline_mean": base.mean() if pairs else math.nan,
        "mean": variant.mean() if pairs else math.nan,
        "difference": differences.mean() if pairs else math.nan,
        "wins": int((differences > 0).sum()),
        "ties": int((differences == 0).sum()),
        "losses": int((differences < 0).sum()),
    }
    if clusters is not None:
        interval = cluster_robust(differences, clusters, alpha)
        row["test"] = f"{CLUSTER_T} ({len(set(clusters.tolist()))} clusters)"
    elif boolean and np.isin(base, (0.0, 1.0)).all() and np.isin(variant, (0.0, 1.0)).all():
        interval = mcnemar(base.astype(bool), variant.astype(bool), alpha)
        row["test"] = MCNEMAR
    else:
        interval = paired_t(differences, alpha)
        row["test"] = PAIRED_T
    row["ci_low"], row["ci_high"], row["p_value"] = interval
    return row


Interval = tuple[float, float, float]  # (low, high, two-sided p)


def _degenerate(differences: np.ndarray) -> Interval | None:
    """Too few pairs for an interval, or differences that do not vary (no t to compute:
    every pair differs by the same amount, so the interval is that amount)."""
    if len(differences) < 2:
        return math.nan, math.nan, math.nan
    if np.ptp(differences) == 0:
        value = float(differences[0])
        return value, value, 1.0 if value == 0 else 0.0
    return None


def paired_t(differences: np.ndarray, alpha: float) -> Interval:
    """The t interval and two-sided p of the mean of paired differences."""
    from scipy import stats

    degenerate = _degenerate(differences)
    if degenerate is not None:
        return degenerate
    test = stats.ttest_1samp(differences, 0.0)
    interval = test.confidence_interval(confidence_level=1 - alpha)
    return float(interval.low), float(interval.high), float(test.pvalue)


def cluster_robust(differences: np.ndarray, clusters: np.ndarray, alpha: float) -> Interval:
    """The mean of paired differences as an OLS intercept with cluster-robust errors, tested
    with a t of (clusters - 1) degrees of freedom."""
    from statsmodels.regression.linear_model import OLS

    degenerate = _degenerate(differences)
    if degenerate is not None:
        return degenerate
    codes = pd.factorize(pd.Series(clusters, dtype=object))[0]
    if codes.max() < 1:  # one cluster: no between-cluster variation to estimate
        return math.nan, math.nan, math.nan
    fit = OLS(differences, np.ones(len(differences))).fit(
        cov_type="cluster", cov_kwds={"groups": codes}, use_t=True
    )
    low, high = fit.conf_int(alpha)[0]
    return float(low), float(high), float(fit.pvalues[0])


def mcnemar(base: np.ndarray, variant: np.ndarray, alpha: float) -> Interval:
    """Exact McNemar on pass/fail pairs: a binomial test of the discordant pairs (the variant
    passes where the baseline fails, against the reverse), and the Agresti-Min interval on
    the difference in pass rates."""
    from scipy import stats

    gained = int((variant & ~base).sum())
    lost = int((base & ~variant).sum())
    pairs = len(base)
    discordant = gained + lost
    p = 1.0 if discordant == 0 else float(stats.binomtest(gained, discordant, 0.5).pvalue)
    # Agresti-Min: add 1/2 to each of the four cells (n grows by 2), then Wald
    n = pairs + 2
    up, down = (gained + 0.5) / n, (lost + 0.5) / n
    difference = up - down
    se = math.sqrt(max(up + down - difference**2, 0.0) / n)
    z = float(stats.norm.ppf(1 - alpha / 2))
    return max(difference - z * se, -1.0), min(difference + z * se, 1.0), p


def mcnemar_counts(base: Sequence[bool], variant: Sequence[bool]) -> tuple[int, int]:
    """(gained, lost): pairs the variant passes and the baseline fails, and the reverse."""
    b, v = np.asarray(base, dtype=bool), np.asarray(variant, dtype=bool)
    return int((v & ~b).sum()), int((b & ~v).sum())


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment (Holm 1979), as `statsmodels.stats.multitest.multipletests(
    method="holm")` computes it (the tests compare the two); written out because that
    function runs a full garbage collection on every call, which dominates a summary."""
    count = len(p_values)
    order = np.argsort(p_values, kind="stable")
    stepped = np.maximum.accumulate((count - np.arange(count)) * p_values[order])
    adjusted = np.empty(count)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def _cost(scores: pd.DataFrame, variant: Hashable) -> float:
    if "cost_usd" not in scores.columns:
        return math.nan
    costs = scores.loc[scores["variant"] == variant, "cost_usd"].astype("Float64")
    return math.nan if costs.isna().all() else float(costs.sum(skipna=True))


def power_table(
    scores: pd.DataFrame,
    *,
    baseline: str,
    effect: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
) -> pd.DataFrame:
    """Per variant: the smallest difference these pairs detect with `power` at `alpha`
    (`detectable_effect`, in the score's units), and the source runs needed to detect
    `effect` (default: the difference observed) with that power (`runs_needed`). Both use
    the standard deviation of the observed per-source differences, and statsmodels'
    power of the two-sided paired t test."""
    require_stats()
    from statsmodels.stats.power import TTestPower

    wide, _ = paired_means(scores)
    solver = TTestPower()
    rows = []
    for variant in (v for v in pd.unique(scores["variant"]) if v != baseline):
        if variant not in wide.columns or baseline not in wide.columns:
            continue
        differences = (wide[variant] - wide[baseline]).dropna().to_numpy()
        pairs = len(differences)
        sd = float(differences.std(ddof=1)) if pairs > 1 else math.nan
        wanted = float(differences.mean()) if effect is None and pairs else effect
        detectable = needed = math.nan
        if pairs > 1 and sd > 0:
            size = solver.solve_power(nobs=pairs, alpha=alpha, power=power)
            detectable = float(size) * sd
            if wanted:
                runs = solver.solve_power(effect_size=abs(wanted) / sd, alpha=alpha, power=power)
                needed = float(math.ceil(runs))
        rows.append(
            {
                "variant": variant,
                "pairs": pairs,
                "sd": sd,
                "effect": wanted,
                "detectable_effect": detectable,
                "runs_needed": needed,
            }
        )
    frame = pd.DataFrame(rows, columns=POWER_COLUMNS)
    frame["runs_needed"] = frame["runs_needed"].astype("Float64").round().astype("Int64")
    return frame
