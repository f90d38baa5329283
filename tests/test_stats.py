"""The report's intervals: seed variance and test sample together (rag.report.stats), no training."""

import numpy as np
import pytest

from rag.report.stats import mean_interval, statistic_interval


def _synthetic(rng, seeds: int, n: int, effect: float, seed_sd: float):
    """Per-example 0/100 scores of two variants, ``seeds`` fine-tunes each, on one test sample of ``n``
    examples drawn from a population. Each example has a difficulty; each fine-tune shifts every
    example's chance by its own seed effect (training noise, sd ``seed_sd`` in probability), and the
    outcome is a Bernoulli draw per fine-tune and example. The true difference is ``effect`` points:
    the expected chance of a minus b over examples and seeds."""
    difficulty = rng.uniform(0.2, 0.8, size=n)  # the test sample: drawn anew in every trial

    def variant(shift: float):
        offsets = rng.normal(0.0, seed_sd, size=(seeds, 1))
        p = np.clip(difficulty[None, :] + shift + offsets, 0, 1)
        return 100.0 * (rng.random((seeds, n)) < p)

    return variant(effect / 100.0), variant(0.0)


@pytest.mark.parametrize("seeds,seed_sd", [(3, 0.03), (3, 0.0), (5, 0.02), (1, 0.0)])
def test_the_two_level_interval_covers_the_true_difference_at_its_nominal_rate(seeds, seed_sd):
    """Seed noise and example noise together; 95 % nominal. (With one seed and seed noise the
    interval would ignore the training variance, which is what the report says about it.)"""
    rng = np.random.default_rng(seeds * 100 + int(seed_sd * 1000))
    trials, covered, widths = 600, 0, []
    for _ in range(trials):
        a, b = _synthetic(rng, seeds, 300, 5.0, seed_sd)
        iv = mean_interval([(1, a), (-1, b)])
        # the population's true difference: the difficulty distribution is symmetric within [0.2, 0.8],
        # so the clip never binds at +5 and the expected seed offset is 0 (up to the clip at the ends)
        covered += iv.lo <= 5.0 <= iv.hi
        widths.append(iv.hi - iv.lo)
    rate = covered / trials
    assert 0.925 <= rate <= 0.98, rate  # 600 trials: the binomial sd at 95 % is 0.9 points


@pytest.mark.parametrize("seeds,seed_sd", [(3, 0.03), (5, 0.05)])
def test_a_cell_whose_seed_spread_matches_its_test_error_is_covered_at_the_nominal_rate(seeds, seed_sd):
    """One variant's mean (a table cell) when the seeds spread about as much as the test sample errs
    (NQ's EM cells: a seed SD of 4-5 points against a test-sample error of about 2.6): counting only
    the seed variance left after the interaction's share in the degrees of freedom covered 92 %."""
    rng = np.random.default_rng(seeds * 10 + int(seed_sd * 100))
    trials, covered = 1000, 0
    for _ in range(trials):
        difficulty = rng.uniform(0.2, 0.8, size=300)  # the population's mean chance is 0.5
        p = np.clip(difficulty[None, :] + rng.normal(0.0, seed_sd, size=(seeds, 1)), 0, 1)
        iv = mean_interval([(1, 100.0 * (rng.random((seeds, 300)) < p))])
        covered += iv.lo <= 50.0 <= iv.hi
    assert 0.93 <= covered / trials <= 0.975, covered / trials


def _twins(rng, seeds: int, n: int, effect: float, shared_sd: float, own_sd: float):
    """Two variants trained with the same seeds (a fine-tuned retriever and its frozen twin): seed s
    shifts both by one shared effect (the same batches from the same starting weights, sd
    ``shared_sd``) and each by its own (sd ``own_sd``); the true difference is ``effect`` points."""
    difficulty = rng.uniform(0.2, 0.8, size=n)
    shared = rng.normal(0.0, shared_sd, size=(seeds, 1))

    def variant(shift: float):
        p = np.clip(difficulty[None, :] + shift + shared + rng.normal(0.0, own_sd, size=(seeds, 1)), 0, 1)
        return 100.0 * (rng.random((seeds, n)) < p)

    return variant(effect / 100.0), variant(0.0)


@pytest.mark.parametrize("seeds,shared_sd,own_sd", [(5, 0.05, 0.02), (3, 0.04, 0.01), (5, 0.0, 0.03)])
def test_twins_paired_by_seed_are_covered_at_the_nominal_rate(seeds, shared_sd, own_sd):
    """The per-seed differences of twins: 95 % nominal whether the shared seed effect dominates or is
    absent (then pairing only costs degrees of freedom); narrower than the unpaired interval when
    the shared effect dominates."""
    rng = np.random.default_rng(seeds * 1000 + int(shared_sd * 1000) + int(own_sd * 100))
    trials, covered, paired_w, unpaired_w = 600, 0, [], []
    for _ in range(trials):
        a, b = _twins(rng, seeds, 300, 5.0, shared_sd, own_sd)
        iv = mean_interval([(1, a - b)])
        covered += iv.lo <= 5.0 <= iv.hi
        paired_w.append(iv.hi - iv.lo)
        unpaired = mean_interval([(1, a), (-1, b)])
        unpaired_w.append(unpaired.hi - unpaired.lo)
    rate = covered / trials
    assert 0.925 <= rate <= 0.98, rate
    if shared_sd > 2 * own_sd:
        assert np.median(paired_w) < 0.8 * np.median(unpaired_w), (np.median(paired_w), np.median(unpaired_w))


def test_seed_noise_that_the_test_sample_cannot_show_widens_the_interval():
    """The same test sample, the same per-example means, more spread between seeds: wider."""
    rng = np.random.default_rng(0)
    base = 100.0 * (rng.random((1, 300)) < 0.6)
    calm = np.repeat(base, 3, axis=0)
    noisy = calm.copy()
    noisy[0, :30] = 100.0  # seed 0 answers 30 more, seed 2 30 fewer: the same mean over seeds
    noisy[2, 30:60] = 0.0
    noisy[2, :30] = np.where(base[0, :30] == 100.0, 100.0, 0.0)
    one = mean_interval([(1, base)])
    assert one.seeds == 1 and one.seed_sd is None
    wide, narrow = mean_interval([(1, noisy)]), mean_interval([(1, calm)])
    assert narrow.seed_sd == 0.0 and wide.seed_sd > 5
    assert wide.hi - wide.lo > narrow.hi - narrow.lo


def test_paired_examples_narrow_a_difference():
    rng = np.random.default_rng(0)
    base = 100.0 * (rng.random(300) < 0.5)
    better = base.copy()
    better[rng.choice(np.flatnonzero(base == 0), 15, replace=False)] = 100.0  # +5 points, same questions
    iv = mean_interval([(1, better), (-1, base)])
    assert iv.estimate == pytest.approx(5.0) and iv.lo > 0
    alone = mean_interval([(1, better)])
    assert iv.hi - iv.lo < alone.hi - alone.lo


def test_a_corpus_statistic_matches_the_mean_path_for_a_mean():
    """statistic_interval's bootstrap of a mean estimates what mean_interval computes exactly (one
    seed); with several seeds it carries the seed variance too."""
    rng = np.random.default_rng(3)
    scores = 100.0 * (rng.random((3, 200)) < rng.uniform(0.4, 0.6, size=(3, 1)))
    stat = lambda rows: [lambda ix, s=s: float(s[ix].mean()) for s in rows]  # noqa: E731
    exact = mean_interval([(1, scores[:1])])
    boot = statistic_interval([(1, stat(scores[:1]))], 200, resamples=2000)
    assert boot.estimate == pytest.approx(exact.estimate)
    assert boot.half_width == pytest.approx(exact.half_width, rel=0.1)
    three = statistic_interval([(1, stat(scores))], 200, resamples=2000)
    assert three.estimate == pytest.approx(scores.mean())
    assert three.seed_sd == pytest.approx(float(scores.mean(1).std(ddof=1)))
    assert three.half_width > 1.5 * statistic_interval([(1, stat([scores.mean(0)]))], 200, resamples=2000).half_width


@pytest.mark.parametrize("seeds,seed_sd", [(3, 0.03), (5, 0.05)])
def test_a_corpus_statistic_over_seeds_is_covered_at_the_nominal_rate(seeds, seed_sd):
    """The bootstrap path (BLEU, ROUGE-L, distinct tri-grams), here on a mean so that the truth is
    known, with the seeds spreading about as much as the test sample errs. It adds the plain variance
    of the per-seed statistics to the bootstrap's (the interaction counted in both: wide), so its
    width and the exact path's are not ordered; each has to cover."""
    rng = np.random.default_rng(seeds * 10 + int(seed_sd * 100))
    trials, covered = 600, 0
    for _ in range(trials):
        difficulty = rng.uniform(0.2, 0.8, size=200)
        p = np.clip(difficulty[None, :] + rng.normal(0.0, seed_sd, size=(seeds, 1)), 0, 1)
        rows = 100.0 * (rng.random((seeds, 200)) < p)
        iv = statistic_interval([(1, [lambda ix, s=s: float(s[ix].mean()) for s in rows])], 200, resamples=100,
                                seed=int(rng.integers(2**31)))
        covered += iv.lo <= 50.0 <= iv.hi
    assert 0.93 <= covered / trials <= 0.985, covered / trials


def test_interval_of_distinct_ngrams_holds_the_measured_value():
    """Resamples repeat generations, which lowers every resample's distinct tri-gram share; the
    interval is still centred on the measured value (its variance is what the resamples give)."""
    from rag.metrics import trigram_distinct

    gens = [f"clue number {i} about the city of place{i} and river{i}" for i in range(60)]
    iv = statistic_interval([(1, [lambda ix: trigram_distinct([gens[i] for i in ix])])], len(gens))
    assert iv.estimate == pytest.approx(trigram_distinct(gens)) and iv.lo < iv.estimate < iv.hi


def test_mismatched_test_sets_are_refused():
    with pytest.raises(ValueError, match="different test sets"):
        mean_interval([(1, np.zeros((2, 10))), (-1, np.zeros((2, 11)))])
