"""Score bands and `rag check` on fabricated finished experiments (no training)."""

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml

from rag.cli import main
from rag.report.bands import band_multiplier, experiment_values, load_bands, make_bands, write_bands

# (task, variant, split) -> metric -> value per seed
RUNS = {
    ("nq", "rag_token", "test"): {"em": [74.0, 76.0, 75.0], "answer_recall@1": [70.0, 71.0, 72.0]},
    ("nq", "rag_token", "dev"): {"em": [70.0, 72.0, 74.0]},
    ("nq", "closed_book", "test"): {"em": [1.3]},
    ("msmarco", "rag_sequence", "test"): {"rougeL": [60.2], "bleu1": [55.0]},
}


def fabricate(root: Path, runs=RUNS, shift: dict | None = None) -> list[Path]:
    """results/<name>/runs/<task>/<variant>/seed<s>/<split>/metrics.json as the DAG writes them;
    ``shift``: (task, variant, split, metric) -> points added to every seed's value."""
    files = []
    for (task, variant, split), metrics in runs.items():
        seeds = len(next(iter(metrics.values())))
        for i in range(seeds):
            vals = {m: v[i] + (shift or {}).get((task, variant, split, m), 0.0) for m, v in metrics.items()}
            path = root / "runs" / task / variant / f"seed{i + 1}" / split / "metrics.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({
                "task": task, "variant": variant, "split": split, "seed": i + 1, "n": 300,
                "metrics": {k: v for k, v in vals.items() if "@" not in k},
                "retrieval": {k: v for k, v in vals.items() if "@" in k}}))
            files.append(path)
    record_runs(root, {(task, variant): len(next(iter(m.values()))) for (task, variant, _), m in runs.items()})
    return files


def record_runs(root: Path, seeds: dict[tuple[str, str], int]) -> None:
    """The experiment's record of its config's runs (config/report.json, key runs), seeds 1..n of each."""
    (root / "config").mkdir(parents=True, exist_ok=True)
    runs = [{"task": t, "variant": v, "seeds": list(range(1, n + 1))} for (t, v), n in seeds.items()]
    (root / "config" / "report.json").write_text(json.dumps({"runs": runs}))


# the same world with more fine-tune seeds (rag replicate-config over a copy of the centre): each
# run's seeds 1.. as the centre has them, then more
REPLICATE = {
    ("nq", "rag_token", "test"): {"em": [74.0, 76.0, 75.0, 75.0, 74.0, 76.0], "answer_recall@1": [70.0, 71.0, 72.0, 71.0, 70.0, 72.0]},
    ("nq", "rag_token", "dev"): {"em": [70.0, 72.0, 74.0, 72.0, 71.0, 73.0]},
    ("nq", "closed_book", "test"): {"em": [1.3, 1.3, 1.3, 1.3, 1.3, 1.3]},
    ("msmarco", "rag_sequence", "test"): {"rougeL": [60.2, 61.2, 59.2, 60.2, 61.2, 59.2], "bleu1": [55.0, 57.0, 53.0, 55.0, 57.0, 53.0]},
}


def bands_file(tmp_path: Path, replicate=REPLICATE) -> Path:
    centre, rep = tmp_path / "centre", tmp_path / "rep"
    fabricate(centre)
    fabricate(rep, runs=replicate)
    path = tmp_path / "bands.yaml"
    assert main(["bands", "--center", str(centre), "--replicates", str(rep), "--name", "fabricated", "--out", str(path)]) == 0
    return path


def test_bands_come_from_the_training_spread_on_one_world(tmp_path):
    header, bands = load_bands(bands_file(tmp_path))
    by = {b.cell: b for b in bands}
    em = by[("nq", "rag_token", "test", "em")]
    # six seeds measured (the centre's three are the replicate's first three: counted once): the mean
    # 75.0; one fine-tune's SD pooled over the run's dev and test (same n: the plain pooled variance,
    # 5 + 5 df); t for the 6 cells with a measured SD; a 3-seed mean against the 6-seed mean
    sd = ((statistics.variance(REPLICATE["nq", "rag_token", "test"]["em"])
           + statistics.variance(REPLICATE["nq", "rag_token", "dev"]["em"])) / 2) ** 0.5
    k = band_multiplier(10, 6)
    assert em.expected == 75.0 and em.seeds == 3
    assert em.tolerance == pytest.approx(k * sd * (1 / 3 + 1 / 6) ** 0.5, abs=0.01)
    assert "6 seeds measured, the default runs 3" in em.source and "10 df" in em.source
    # a closed-book model that answers the same on every seed lends no spread and borrows none: two
    # test examples' worth (200 / 300 points)
    closed_book = by[("nq", "closed_book", "test", "em")]
    assert closed_book.tolerance == pytest.approx(200 / 300, abs=0.01) and closed_book.seeds == 1 and "two test examples" in closed_book.source
    # a one-seed run: its own SD over six seeds, a 1-seed value against the 6-seed mean
    bleu = by[("msmarco", "rag_sequence", "test", "bleu1")]
    k5 = band_multiplier(5, 6)
    assert bleu.tolerance == pytest.approx(k5 * 1.7889 * (1 + 1 / 6) ** 0.5, abs=0.01)
    assert header["family_wise"] == 0.95 and header["widest"] == 10 and "Student's t" in header["method"]
    assert "replicate" in header["method"]


def test_dev_and_test_pool_their_spread_per_example():
    """The run's dev and test splits score the same models: one fine-tune's SD is pooled over them,
    each variance scaled to its examples, so a split of 4x the examples gets half the SD."""
    dev, test = ("nq", "rag_token", "dev", "em"), ("nq", "rag_token", "test", "em")
    center = {dev: {1: 70.0}, test: {1: 70.0}}
    rep = {dev: {1: 70.0, 2: 72.0, 3: 68.0}, test: {1: 70.0, 2: 71.0, 3: 69.0}}
    bands, _ = make_bands(center, [rep], {("nq", "rag_token", "dev"): 100, ("nq", "rag_token", "test"): 400})
    by = {b.split: b for b in bands}
    per_example = (4.0 * 100 + 1.0 * 400) / 2  # variances 4 and 1, 2 df each: the same per example
    k = band_multiplier(4, 2)
    assert by["dev"].tolerance == pytest.approx(k * (per_example / 100) ** 0.5 * (1 + 1 / 3) ** 0.5, abs=0.01)
    assert by["test"].tolerance == pytest.approx(k * (per_example / 400) ** 0.5 * (1 + 1 / 3) ** 0.5, abs=0.01)


def test_a_cell_wider_than_10_points_is_listed_unchecked_with_the_seeds_it_needs(tmp_path, capsys):
    """A one-seed cell whose training moves it by 10 points (SD) gets a band far wider than 10
    points: it would miss a 10-point drop, so the band file lists it under unchecked: with its reason
    and how many seeds would check it, and rag check counts it apart."""
    rep = {**REPLICATE, ("nq", "closed_book", "test"): {"em": [1.3, 11.3, 21.3, 1.3, 11.3, 21.3]}}
    out = bands_file(tmp_path, replicate=rep)
    header, bands = load_bands(out)
    assert ("nq", "closed_book", "test", "em") not in {b.cell for b in bands} and len(bands) == 5
    (entry,) = header["unchecked"]
    assert entry["cell"] == "nq/closed_book/test/em" and entry["tolerance"] > 10
    assert "wider than 10 points" in entry["why"] and "more than 20 seeds would check it" in entry["why"]
    assert all(b.tolerance <= 10 for b in bands)
    # Bonferroni over the 5 cells a check tests, not the 6 with a measured spread: a narrower t
    em = {b.cell: b for b in bands}[("nq", "rag_token", "test", "em")]
    assert "5 cells checked" in em.source
    sd = ((statistics.variance(REPLICATE["nq", "rag_token", "test"]["em"])
           + statistics.variance(REPLICATE["nq", "rag_token", "dev"]["em"])) / 2) ** 0.5
    assert em.tolerance == pytest.approx(band_multiplier(10, 5) * sd * (1 / 3 + 1 / 6) ** 0.5, abs=0.01)
    assert band_multiplier(10, 5) < band_multiplier(10, 6)
    capsys.readouterr()
    assert main(["check", "--bands", str(out), "--metrics", *map(str, fabricate(tmp_path / "run"))]) == 0
    assert "sensitivity: 5 cell(s) checked" in (out := capsys.readouterr().out) and "; 1 cell(s) unchecked (the band file" in out


def test_a_cell_without_a_replicate_is_unchecked_and_a_replicate_of_another_world_is_refused(tmp_path, capsys):
    centre = tmp_path / "centre"
    fabricate(centre)
    out = tmp_path / "bands.yaml"
    assert main(["bands", "--center", str(centre), "--name", "no replicates", "--out", str(out)]) == 0
    header, bands = load_bands(out)
    # the several-seed cells measure their own spread; the one-seed cells have none
    assert {b.cell for b in bands} == {c + (m,) for c, ms in RUNS.items() for m in ms if len(ms[m]) > 1}
    assert {e["cell"] for e in header["unchecked"]} == {"nq/closed_book/test/em", "msmarco/rag_sequence/test/rougeL",
                                                        "msmarco/rag_sequence/test/bleu1"}
    assert all("no training spread" in e["why"] for e in header["unchecked"])
    rep = tmp_path / "rep"
    fabricate(rep, runs=REPLICATE)
    for root, seed in ((centre, 13), (rep, 14)):
        (root / "config" / "corpus.json").write_text(json.dumps({"seed": seed}))
    capsys.readouterr()
    assert main(["bands", "--center", str(centre), "--replicates", str(rep), "--name", "x", "--out", str(out)]) == 2
    assert f"{rep}: top-level seed 14, not the centre's 13" in capsys.readouterr().err


def test_bands_hold_together_at_their_stated_family_wise_rate():
    """Calibration on synthetic experiments with a known training SD: bands made (make_bands) from a
    centre of three seeds and a replicate of eight on one world hold every one of 100 cells on a new
    run (another machine: a new draw of training noise, the same test set) at least 95 % of the
    time, within the simulation's noise; bands of two thirds the width fail far more often (they are
    not wider than their level needs)."""
    rng = np.random.default_rng(0)
    reps, cells, seeds, measured = 300, 100, 3, 8
    sigma = rng.uniform(0.5, 2.0, cells)  # one fine-tune's SD, per cell
    truth = rng.uniform(20, 80, cells)
    n_of = {("nq", f"v{i}", split): 10**6 for i in range(cells) for split in ("dev", "test")}  # no test-size floor
    miss_t = miss_narrow = 0
    for _ in range(reps):
        draw = truth[:, None, None] + sigma[:, None, None] * rng.standard_normal((cells, 2, measured))
        rep = {("nq", f"v{i}", split, "em"): {s + 1: float(draw[i, j, s]) for s in range(measured)}
               for i in range(cells) for j, split in enumerate(("dev", "test"))}
        center = {cell: {s: v for s, v in by_seed.items() if s <= seeds} for cell, by_seed in rep.items()}
        bands, _ = make_bands(center, [rep], n_of)  # a cell wider than 10 points is left out: no check
        new = truth[:, None] + sigma[:, None] * rng.standard_normal((cells, 2, seeds)).mean(2)
        gap = np.array([abs(new[int(b.variant[1:]), ("dev", "test").index(b.split)] - b.expected) / b.tolerance for b in bands])
        miss_t += bool((gap > 1).any())
        miss_narrow += bool((gap * 1.5 > 1).any())
    assert miss_t / reps <= 0.05 + 3 * (0.05 * 0.95 / reps) ** 0.5, miss_t / reps
    assert miss_narrow / reps > 0.3, miss_narrow / reps


def test_every_checked_cell_catches_a_10_point_drop(tmp_path, capsys):
    """A 10-point drop injected into each checked cell in turn fails rag check naming that cell and
    no other; rag check prints the drop each cell catches and the sensitivity summary."""
    bands = bands_file(tmp_path)
    header, cells = load_bands(bands)
    for band in cells:
        files = fabricate(tmp_path / "drop" / "_".join(band.cell).replace("@", "at"), shift={band.cell: -10.0})
        capsys.readouterr()
        assert main(["check", "--bands", str(bands), "--metrics", *map(str, files)]) == 1, band.cell
        assert f"1 cell(s) out of band: {'/'.join(band.cell)}" in capsys.readouterr().err
    assert main(["check", "--bands", str(bands), "--metrics", *map(str, fabricate(tmp_path / "run"))]) == 0
    out = capsys.readouterr().out
    em = next(line for line in out.splitlines() if line.startswith("nq/rag_token/test/em "))
    assert f"> {next(b for b in cells if b.cell == ('nq', 'rag_token', 'test', 'em')).tolerance:.1f}" in em
    assert (f"sensitivity: {len(cells)} cell(s) checked, {sum(b.tolerance <= 5 for b in cells)} catch a drop of 5 points "
            f"or less, {len(cells)} of 10 points or less; 0 cell(s) unchecked") in out


def test_check_passes_in_band_and_fails_naming_exactly_the_cells_pushed_out(tmp_path, capsys):
    bands = bands_file(tmp_path)
    run = tmp_path / "run"
    files = fabricate(run, shift={("nq", "rag_token", "test", "em"): 0.5})  # inside its band
    assert main(["check", "--bands", str(bands), "--metrics", *map(str, files), "--out", str(tmp_path / "ok.txt")]) == 0
    out = capsys.readouterr().out
    assert out.count("in band (OK)") == 6 and "OUT OF BAND" not in out and (tmp_path / "ok.txt").is_file()

    bad = tmp_path / "bad"
    files = fabricate(bad, shift={("nq", "rag_token", "test", "em"): -9.0, ("msmarco", "rag_sequence", "test", "bleu1"): 30.0})
    rc = main(["check", "--bands", str(bands), "--metrics", *map(str, files), "--out", str(tmp_path / "bad.txt")])
    captured = capsys.readouterr()
    assert rc == 1 and not (tmp_path / "bad.txt").exists()
    failed = [line.split()[0] for line in captured.out.splitlines() if "OUT OF BAND" in line]
    assert sorted(failed) == ["msmarco/rag_sequence/test/bleu1", "nq/rag_token/test/em"]
    assert "2 cell(s) out of band: msmarco/rag_sequence/test/bleu1, nq/rag_token/test/em" in captured.err
    em_line = next(line for line in captured.out.splitlines() if line.startswith("nq/rag_token/test/em"))
    assert em_line.split()[1:5] == ["75.0", "±", "2.7", "66.0"]  # the expected value beside the measured mean


def test_a_check_over_another_number_of_seeds_says_which_cells(tmp_path, capsys):
    """A band's tolerance is for a mean over the seeds it was made with: a run of fewer seeds (a
    config with fewer) is checked, and the cells measured over another number are named."""
    bands = bands_file(tmp_path)
    fewer = {cell: ({m: v[:2] for m, v in metrics.items()} if cell == ("nq", "rag_token", "test") else metrics)
             for cell, metrics in RUNS.items()}
    files = fabricate(tmp_path / "run", runs=fewer)
    assert main(["check", "--bands", str(bands), "--metrics", *map(str, files)]) == 0
    err = capsys.readouterr().err
    assert ("note: 2 cell(s) measured over another number of fine-tune seeds than their band was made for, whose "
            "tolerance is for a mean over that many: nq/rag_token/test/answer_recall@1 (2 against 3), "
            "nq/rag_token/test/em (2 against 3)") in err
    files = fabricate(tmp_path / "same")
    assert main(["check", "--bands", str(bands), "--metrics", *map(str, files)]) == 0
    assert "another number of fine-tune seeds" not in capsys.readouterr().err


def test_a_check_of_another_world_says_whose_bands_they_are(tmp_path, capsys):
    """`--config seed=14` is another world: the default's bands (top-level seed 13) need not hold for it,
    and the check says so beside its verdict instead of leaving a user to read 11 failures as a fault."""
    centre = tmp_path / "centre"
    fabricate(centre)
    (centre / "config" / "corpus.json").write_text(json.dumps({"seed": 13}))
    bands = tmp_path / "bands.yaml"
    assert main(["bands", "--center", str(centre), "--name", "fabricated", "--out", str(bands)]) == 0
    assert load_bands(bands)[0]["seed"] == 13
    files = fabricate(tmp_path / "run", shift={("nq", "rag_token", "test", "em"): -9.0})
    assert main(["check", "--bands", str(bands), "--metrics", *map(str, files), "--seed", "14"]) == 1
    err = capsys.readouterr().err
    assert f"note: {bands} holds for top-level seed 13 (its world); this experiment's is 14" in err
    assert "1 cell(s) out of band: nq/rag_token/test/em" in err
    assert main(["check", "--bands", str(bands), "--metrics", *map(str, files), "--seed", "13"]) == 1
    assert "holds for top-level seed" not in capsys.readouterr().err


def test_a_check_that_matches_no_run_fails(tmp_path, capsys):
    bands = bands_file(tmp_path)
    files = fabricate(tmp_path / "other_task", runs={("fever3", "closed_book", "test"): {"accuracy": [40.0]}})
    assert main(["check", "--bands", str(bands), "--metrics", *map(str, files)]) == 1
    assert "none of the" in capsys.readouterr().err


@pytest.mark.parametrize("entry,message", [
    ({"task": "nq"}, "missing variant"),
    ({"task": "nq", "variant": "closed_book", "split": "test", "metric": "em", "expected": 1, "tolerance": -1}, "'tolerance' must be"),
    ({"task": "nq", "variant": "closed_book", "split": "test", "metric": "em", "expected": "x", "tolerance": 1}, "'expected' must be"),
])
def test_a_bad_band_file_is_one_line_naming_the_entry(tmp_path, entry, message):
    from rag.errors import DataError

    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({"version": 2, "cells": [entry]}))
    with pytest.raises(DataError, match=rf"b.yaml: cells\[0\]: .*{message}"):
        load_bands(path)


def test_the_committed_band_files_load():
    root = Path(__file__).resolve().parents[1]
    for name in ("miniworld", "paper"):
        header, bands = load_bands(root / "config" / "bands" / f"{name}.yaml")
        assert bands and header.get("method")
        assert all(b.source for b in bands), name  # every band says where it comes from


def test_check_scores_the_predictions_themselves(tmp_path, capsys):
    """Given the predictions, rag check scores them again: altering one predictions file drops that
    cell out of band, whatever its metrics.json says."""
    metrics, preds = [], []
    for seed in (1, 2, 3):
        d = tmp_path / "runs" / "nq" / "rag_token" / f"seed{seed}" / "test"
        d.mkdir(parents=True)
        rows = [{"id": f"q{j}", "prediction": "yes" if j < 15 + seed else "no", "targets": ["yes"]} for j in range(20)]
        (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "metrics.json").write_text(json.dumps({"task": "nq", "variant": "rag_token", "split": "test", "seed": seed,
                                                    "n": 20, "metrics": {"em": 5.0 * (15 + seed)}}))
        metrics.append(d / "metrics.json")
        preds.append(d / "predictions.jsonl")
    bands = tmp_path / "bands.yaml"
    bands.write_text(yaml.safe_dump({"version": 2, "cells": [{"task": "nq", "variant": "rag_token", "split": "test", "metric": "em",
                                                "expected": 85.0, "tolerance": 6.0, "source": "test"}]}))
    args = ["check", "--bands", str(bands), "--metrics", *map(str, metrics), "--predictions", *map(str, preds)]
    record_runs(tmp_path, {("nq", "rag_token"): 3})
    experiment = ["check", "--bands", str(bands), "--experiment", str(tmp_path)]  # finds the same files
    metrics_only = ["check", "--bands", str(bands), "--metrics", *map(str, metrics)]
    assert main(args) == 0 and main(experiment) == 0
    rows = [json.loads(line) for line in preds[0].read_text().splitlines()]
    for r in rows[:12]:
        r["prediction"] = "no"  # seed 1 now answers 4 of 20: the mean over seeds drops to 71.7
    preds[0].write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert main(args) == 1
    assert "1 cell(s) out of band: nq/rag_token/test/em" in capsys.readouterr().err
    assert main(experiment) == 1
    assert "1 cell(s) out of band: nq/rag_token/test/em" in capsys.readouterr().err
    # the metrics.json files alone still read 85.0: the check says it did not score the predictions
    assert main(metrics_only) == 0
    assert "note: the task metrics were read from the metrics.json files, not scored again" in capsys.readouterr().err


def test_check_of_an_experiment_names_a_missing_predictions_file(tmp_path, capsys):
    fabricate(tmp_path / "run")
    bands = bands_file(tmp_path)
    assert main(["check", "--bands", str(bands), "--experiment", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    missing = tmp_path / "run" / "runs" / "nq" / "rag_token" / "seed1" / "dev" / "predictions.jsonl"
    assert f"error: {missing}: missing (and 7 more): each run of {tmp_path / 'run'} writes its predictions" in err
    assert main(["check", "--bands", str(bands), "--experiment", str(tmp_path / "run"), "--predictions", "x.jsonl"]) == 2
    assert "--predictions pairs with --metrics" in capsys.readouterr().err
    assert main(["check", "--bands", str(bands), "--experiment", str(tmp_path / "nothing")]) == 2
    assert f"error: {tmp_path / 'nothing' / 'config' / 'report.json'}: not found: an experiment folder records" in capsys.readouterr().err
    record_runs(tmp_path / "nothing", {("nq", "rag_token"): 1})
    assert main(["check", "--bands", str(bands), "--experiment", str(tmp_path / "nothing")]) == 2
    assert "no runs/<task>/<variant>/seed<seed>/<split>/metrics.json files of its config's runs" in capsys.readouterr().err


def test_predictions_given_in_another_order_than_the_metrics_are_refused(tmp_path, capsys):
    """--predictions pair with --metrics by position: a list in another order is one error line
    naming both files, not one run's answers scored as another's."""
    metrics, preds = [], []
    for variant in ("rag_sequence", "rag_token"):
        d = tmp_path / "runs" / "nq" / variant / "seed1" / "test"
        d.mkdir(parents=True)
        (d / "predictions.jsonl").write_text(json.dumps({"id": "q0", "prediction": "yes", "targets": ["yes"]}) + "\n")
        (d / "metrics.json").write_text(json.dumps({"task": "nq", "variant": variant, "split": "test", "seed": 1,
                                                    "n": 1, "metrics": {"em": 100.0}}))
        metrics.append(d / "metrics.json")
        preds.append(d / "predictions.jsonl")
    bands = tmp_path / "bands.yaml"
    bands.write_text(yaml.safe_dump({"version": 2, "cells": [{"task": "nq", "variant": "rag_token", "split": "test", "metric": "em",
                                                "expected": 100.0, "tolerance": 1.0, "source": "test"}]}))
    args = ["check", "--bands", str(bands), "--metrics", *map(str, metrics), "--predictions"]
    assert main(args + [str(p) for p in preds]) == 0
    capsys.readouterr()
    assert main(args + [str(p) for p in preds[::-1]]) != 0
    err = capsys.readouterr().err
    assert f"{preds[1]}: paired by position with {metrics[0]}, but it is run nq/rag_token/seed1/test, not nq/rag_sequence/seed1/test" in err
    assert len(err.strip().splitlines()) == 1


def test_an_experiment_is_checked_and_banded_over_its_config_s_runs_not_every_seed_folder(tmp_path, capsys):
    """Run a config with seeds 1-2, then one with seed 1: the folder keeps seed2, which the config no
    longer runs. rag check --experiment and rag bands --center read the runs the config records
    (config/report.json, as snakemake check), and a note names the seed folder left out."""
    root = tmp_path / "exp"
    recall = "answer_recall@1"  # read from metrics.json (a task metric is scored again from the predictions)
    fabricate(root, {("nq", "rag_token", "test"): {recall: [74.0, 70.0]}, ("nq", "rag_token", "dev"): {recall: [70.0, 66.0]}})
    for p in root.glob("runs/*/*/*/*/metrics.json"):
        p.with_name("predictions.jsonl").write_text(json.dumps({"id": "q", "prediction": "a", "targets": ["a"]}) + "\n")
    record_runs(root, {("nq", "rag_token"): 1})  # the config now runs seed 1 alone
    bands = tmp_path / "b.yaml"
    bands.write_text(yaml.safe_dump({"version": 2, "cells": [{"task": "nq", "variant": "rag_token", "split": "test",
                                                              "metric": recall, "expected": 74.0, "tolerance": 1.0, "seeds": 1}]}))
    capsys.readouterr()
    # seed 1's 74.0 is in band; both seeds' mean, 72.0, is not
    assert main(["check", "--bands", str(bands), "--experiment", str(root)]) == 0
    out, err = capsys.readouterr()
    assert "74.0 ± 1.0  74.0      1" in out and "another number of fine-tune seeds" not in err
    assert f"note: {root} (runs of its config/report.json): 1 seed folder(s) are no run of its config, not counted: " \
           "runs/nq/rag_token/seed2" in err
    out_bands = tmp_path / "made.yaml"
    assert main(["bands", "--center", str(root), "--name", "x", "--out", str(out_bands)]) == 0
    header, made = load_bands(out_bands)
    assert not made and {e["cell"]: e["why"] for e in header["unchecked"]}[f"nq/rag_token/test/{recall}"].startswith("1 seed measured")
    assert "not counted: runs/nq/rag_token/seed2" in capsys.readouterr().err
    record_runs(root, {("nq", "rag_token"): 3})  # a seed of the config not run yet: a note names its files
    assert main(["check", "--bands", str(bands), "--experiment", str(root)]) == 1
    assert "2 metrics file(s) of its config's runs are not written (not finished?), their cells not measured: " \
           "runs/nq/rag_token/seed3/dev/metrics.json, runs/nq/rag_token/seed3/test/metrics.json" in capsys.readouterr().err


def test_snakemake_check_and_check_of_the_experiment_read_the_same_runs(tmp_path):
    """`snakemake check` hands rag check the metrics files of the runs of the config; the report section
    records the same runs, in the same order, for rag check --experiment (rag.runs.experiment_runs)."""
    from rag.config import load_config, sections
    from rag.report.bands import recorded_runs
    from tests.conftest import ROOT, smk

    config = ROOT / "tests" / "data" / "e2e.yaml"
    dry = smk(tmp_path, "-n", "-p", "check", configfile=config)
    assert dry.returncode == 0, dry.stderr[-2000:]
    command = next(line for line in dry.stdout.splitlines() if "rag check --bands" in line)
    given = command.split(" --metrics ", 1)[1].split(" --predictions ", 1)[0].split()
    root = tmp_path / "results" / "e2e"
    (root / "config").mkdir(parents=True)
    (root / "config" / "report.json").write_text(json.dumps(sections(load_config(config, check_files=False))["report"]))
    _, listed, _ = recorded_runs(root)  # nothing has run: every file of the config's runs is still to be written
    assert given == [str(p.relative_to(tmp_path)) for p in listed] and len(given) == 2 * 14
