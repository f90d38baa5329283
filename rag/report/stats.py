"""95 % intervals that carry both sources of noise in a measured number: the fine-tune seed and the test sample.

A cell or a claim (a difference of two cells) is the mean over the S seeds of each side, each decoded on
the same n test examples. Its variance is the test sample's (``var(x̄_i) / n`` for per-example scores,
by a paired bootstrap for a corpus-level statistic) plus ``σ²_seed / S`` per side (for per-example scores
the two-way method-of-moments estimate ``max(0, var_s(x̄_s) - σ̂²_interaction / n)``); the interval is
``estimate ± t · sqrt(V)`` at the Welch-Satterthwaite degrees of freedom. One seed per side: the test sample's alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

ALPHA = 0.05
RESAMPLES = 200  # bootstrap resamples of a corpus-level statistic (its variance, not its quantiles)

Statistic = Callable[[np.ndarray], float]  # example indices -> the statistic on those examples


@dataclass(frozen=True)
class Interval:
    estimate: float
    lo: float
    hi: float
    seed_sd: float | None  # the spread of the per-seed statistics (sample SD; the larger side's for a difference)
    seeds: int  # the fewest seeds of any side (1: the interval ignores that side's training variance)
    n: int  # test examples
    side_seeds: tuple[int, ...] = ()  # the seeds of each side

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2


def _t_quantile(df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(1 - ALPHA / 2, df)) if np.isfinite(df) else float(t.ppf(1 - ALPHA / 2, 1e9))


def _combine(estimate: float, v_examples: float, seed_parts: list[tuple[float, float, int]], n: int,
             side_seeds: tuple[int, ...]) -> Interval:
    """``seed_parts``, of each side with S > 1: (σ²_seed, the mean square it is estimated from, S); a seed
    term σ²_seed / S enters Satterthwaite's formula with its whole mean square (S - 1 degrees of freedom).
    The spread shown is the largest side's SD of its per-seed statistics as measured (the mean square's root)."""
    seed_sd = float(np.sqrt(max(ms for _, ms, _ in seed_parts))) if seed_parts else None
    terms = [(var / s, ms / s, s) for var, ms, s in seed_parts]
    v_seed = sum(v for v, _, _ in terms)
    total = v_examples + v_seed
    seeds = min(side_seeds)
    if total <= 0:
        return Interval(estimate, estimate, estimate, seed_sd, seeds, n, side_seeds)
    denom = (sum(ms * ms / (s - 1) for v, ms, s in terms if v > 0)
             + (v_examples * v_examples / (n - 1) if n > 1 else 0.0))
    df = total * total / denom if denom > 0 else float("inf")
    half = _t_quantile(df) * float(np.sqrt(total))
    return Interval(estimate, estimate - half, estimate + half, seed_sd, seeds, n, side_seeds)


def mean_interval(sides: Sequence[tuple[int, np.ndarray]]) -> Interval:
    """The interval of ``Σ sign · mean over seeds and examples`` of per-example scores.

    ``sides``: (sign, scores of shape (S, n)): +1 for what is measured, -1 for what it is compared
    with; every side on the same n examples in the same order."""
    mats = [(sign, np.atleast_2d(np.asarray(m, dtype=float))) for sign, m in sides]
    n = mats[0][1].shape[1]
    if any(m.shape[1] != n for _, m in mats):
        raise ValueError(f"sides of different test sets: {[m.shape[1] for _, m in mats]} examples")
    if n == 0:
        raise ValueError("an interval of no examples")
    per_example = sum(sign * m.mean(0) for sign, m in mats)
    estimate = float(per_example.mean())
    v_examples = float(per_example.var(ddof=1)) / n if n > 1 else 0.0
    parts = [(*_seed_variance(m), m.shape[0]) for _, m in mats if m.shape[0] > 1]
    return _combine(estimate, v_examples, parts, n, tuple(m.shape[0] for _, m in mats))


def _seed_variance(m: np.ndarray) -> tuple[float, float]:
    """(σ²_seed, the mean square it is estimated from) of a (seeds x examples) matrix: the variance of
    its seed means less the interaction's share of it, which the test-sample term carries (two-way
    random effects, method of moments), and that variance of the seed means."""
    seeds, n = m.shape
    ms = float(m.mean(1).var(ddof=1))
    if n < 2:
        return ms, ms
    resid = m - m.mean(1, keepdims=True) - m.mean(0, keepdims=True) + m.mean()
    interaction = float((resid ** 2).sum()) / ((seeds - 1) * (n - 1))
    return max(0.0, ms - interaction / n), ms


def statistic_interval(sides: Sequence[tuple[int, Sequence[Statistic]]], n: int, resamples: int = RESAMPLES,
                       seed: int = 0) -> Interval:
    """The interval of ``Σ sign · mean over seeds`` of a corpus-level statistic.

    ``sides``: (sign, one statistic per seed), each a function of example indices (``np.arange(n)``:
    the whole test set). The test-sample variance is that of the seed-averaged sum over
    ``resamples`` bootstrap resamples of the examples, each resample shared by every seed and side."""
    if n == 0:
        raise ValueError("an interval of no examples")
    full = np.arange(n)
    per_seed = [np.array([f(full) for f in fns]) for _, fns in sides]
    estimate = float(sum(sign * v.mean() for (sign, _), v in zip(sides, per_seed)))
    rng = np.random.default_rng(seed)
    boot = np.empty(resamples)
    for r in range(resamples):
        ix = rng.integers(0, n, size=n)
        boot[r] = sum(sign * np.mean([f(ix) for f in fns]) for sign, fns in sides)
    parts = [(float(v.var(ddof=1)), float(v.var(ddof=1)), v.size) for v in per_seed if v.size > 1]  # taken as they are
    return _combine(estimate, float(boot.var(ddof=1)), parts, n, tuple(len(fns) for _, fns in sides))
