"""Stopping an experiment once the answer is clear: an anytime-valid confidence sequence.

A confidence interval is valid at one sample size chosen in advance; look at it after every
pair and stop when it excludes zero, and a true null is "decided" far more often than alpha.
A confidence sequence is an interval at every sample size at once, valid however often it is
looked at and whenever the looking stops: with probability 1 - alpha it covers the true mean
difference at every n simultaneously.

kassette uses one formula: the two-sided normal-mixture boundary (Robbins 1970; Howard,
Ramdas, McAuliffe and Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence
sequences", Annals of Statistics 49(2), eq. (14)), with the running sample standard deviation
in place of the known one, which makes it an asymptotic confidence sequence (Waudby-Smith,
Arnold, Wu, Chen and Ramdas 2024, "Time-uniform central limit theory and asymptotic
confidence sequences", Annals of Statistics 52(6), Theorem 2.2):

    mean_n ± s_n * sqrt( 2 (n r + 1) / (n² r) * log( sqrt(n r + 1) / alpha ) )

where r = rho² = (-2 log alpha + log(-2 log alpha + 1)) / N makes the sequence tightest at N,
the number of source runs planned (Howard et al. 2021, section 3.5). No maintained Python
package installs for this (confseq ships only a source archive needing a C++ toolchain
and Boost; `expectation` on PyPI is a placeholder), so the formula is written here, once.
Several variants share alpha by Bonferroni (alpha / variants each), so the chance that any of
them is wrongly decided stays at alpha. The plug-in standard deviation is unsteady over the
first few pairs, so nothing is decided before `MIN_PAIRS` pairs (the tests simulate the
resulting error rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Decided", "decided"]

MIN_PAIRS = 10  # no decision from fewer pairs: s_n is too unsteady before (see the tests)


@dataclass(frozen=True)
class Decided:
    """`stop_when=kx.decided(alpha)`: stop an experiment once every variant's confidence
    sequence for its mean difference from the baseline excludes zero."""

    alpha: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be between 0 and 1, not {self.alpha!r}")

    def to_json(self) -> dict[str, float]:
        return {"alpha": self.alpha}

    def radius(self, sd: np.ndarray, n: np.ndarray, planned: int, variants: int) -> np.ndarray:
        """The half-width of the sequence after `n` pairs with sample deviation `sd`."""
        alpha = self.alpha / max(variants, 1)
        rho2 = (-2 * math.log(alpha) + math.log(-2 * math.log(alpha) + 1)) / max(planned, 1)
        n = np.asarray(n, dtype="float64")
        with np.errstate(divide="ignore", invalid="ignore"):
            width = 2 * (n * rho2 + 1) / (n**2 * rho2) * np.log(np.sqrt(n * rho2 + 1) / alpha)
            return np.asarray(sd, dtype="float64") * np.sqrt(width)

    def first_decision(self, differences: Sequence[float], planned: int, variants: int) -> int:
        """After how many pairs (1-based) the sequence first excludes zero; 0 if it never
        does over `differences`, the per-source differences in the order they were run."""
        values = np.asarray(differences, dtype="float64")
        if len(values) < MIN_PAIRS:
            return 0
        n = np.arange(1, len(values) + 1, dtype="float64")
        sums = np.cumsum(values)
        means = sums / n
        squares = np.cumsum(values**2)
        with np.errstate(divide="ignore", invalid="ignore"):
            variance = np.maximum(squares - sums**2 / n, 0.0) / (n - 1)
        radius = self.radius(np.sqrt(variance), n, planned, variants)
        excluded = (np.abs(means) > radius) & (n >= MIN_PAIRS) & np.isfinite(radius)
        hits = np.flatnonzero(excluded)
        return int(hits[0]) + 1 if len(hits) else 0


def decided(alpha: float = 0.05) -> Decided:
    """The sequential stop for `kx.experiment(..., stop_when=kx.decided(alpha))`: run the
    source runs in a seeded random order and stop launching branches once every variant's
    anytime-valid confidence sequence excludes zero (see `kassette.explore._sequential`)."""
    return Decided(alpha)
