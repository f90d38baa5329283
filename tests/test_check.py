"""Score bands and `rag check` on fabricated finished experiments (no training)."""

import json
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
    ("nq", "bart", "test"): {"em": [1.3]},
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
    return files


def bands_file(tmp_path: Path) -> Path:
    centre = tmp_path / "centre"
    fabricate(centre)
    # the same config under two other top-level seeds: other values for the one-seed cells
    one_seed = [("nq", "bart", "test", "em"), ("msmarco", "rag_sequence", "test", "rougeL"), ("msmarco", "rag_sequence", "test", "bleu1")]
    fabricate(tmp_path / "other", shift={c: 2.0 for c in one_seed})
    fabricate(tmp_path / "third", shift={c: -2.0 for c in one_seed})
    path = tmp_path / "bands.yaml"
    rc = main(["bands", "--center", str(centre), "--others", str(tmp_path / "other"), str(tmp_path / "third"),
               "--name", "fabricated", "--out", str(path)])
    assert rc == 0
    return path


def test_bands_come_from_the_spread_across_seeds(tmp_path):
    header, bands = load_bands(bands_file(tmp_path))
    by = {b.cell: b for b in bands}
    em = by[("nq", "rag_token", "test", "em")]
    # three seeds (74, 76, 75) in each of three experiments: one fine-tune's SD pooled over them (the
    # same spread: SD 1, 6 df); the tolerance is t at 6 df for the 3 several-seed cells at a 5 % family
    # level, times the SD of a difference of two 3-seed means
    k6 = band_multiplier(6, 3)
    assert k6 == pytest.approx(3.287, abs=1e-3)
    assert em.expected == 75.0 and em.tolerance == pytest.approx(k6 * (2 / 3) ** 0.5, abs=0.01) and em.seeds == 3
    assert "6 df" in em.source
    # one seed: the SD across the three experiments (1.3, 3.3, -0.7: 2), 4 SD of a difference of two runs
    bart = by[("nq", "bart", "test", "em")]
    assert bart.tolerance == pytest.approx(4 * 2 * 2 ** 0.5, abs=0.01) and bart.seeds == 1
    assert "SD" in bart.source and header["name"] == "fabricated" and "Student's t" in header["method"]
    # never tighter than two test examples (200 / 300 points)
    assert min(b.tolerance for b in bands) >= 200 / 300 - 1e-9


def test_a_one_seed_cell_takes_the_spread_of_its_task_split_and_metric():
    """Three worlds can give one cell an SD near 0 by chance (the default's Jeopardy RAG-Sequence test
    BLEU-1: 0.20, then 4.2 points off on another CPU): a one-seed cell's SD is pooled over the one-seed
    variants of its task, split and metric, and never below its own."""
    def exp(*vals):
        return {("jeopardy", "rag_sequence", "test", "bleu1"): [vals[0]], ("jeopardy", "rag_token", "test", "bleu1"): [vals[1]]}

    bands = {b.variant: b for b in make_bands(exp(79.5, 70.0), [exp(79.7, 74.0), exp(79.3, 66.0)],
                                                    {("jeopardy", v, "test"): 600 for v in ("rag_sequence", "rag_token")})}
    pooled = ((0.2 ** 2 + 4.0 ** 2) / 2) ** 0.5  # 2 df each
    assert bands["rag_sequence"].tolerance == pytest.approx(4 * pooled * 2 ** 0.5, abs=0.01)  # was 4 * 0.2 * sqrt(2)
    assert bands["rag_token"].tolerance == pytest.approx(4 * 4.0 * 2 ** 0.5, abs=0.01)  # its own SD is the larger
    assert "pooled over the 2 one-seed variant(s)" in bands["rag_sequence"].source


def test_replicates_widen_a_one_seed_cell_whose_training_moves_it_more_than_the_worlds():
    """The default's CuratedTrec RAG-Token dev EM (one seed, 50 questions) read 48 / 60 / 56 in three
    worlds and 80 on another code path of the same CPU: one training draw moved it more than the worlds
    spread. Replicates (the same config with more fine-tune seeds on the one-seed runs) measure that
    training SD; the tolerance takes it where it is the larger, and leaves the rest as they were."""
    ct, ms, nq = ("curatedtrec", "rag_token", "dev", "em_regex"), ("msmarco", "rag_token", "test", "rougeL"), ("nq", "rag_token", "test", "em")
    center = {ct: [48.0], ms: [40.0], nq: [74.0, 76.0, 75.0]}
    others = [{ct: [60.0], ms: [41.0], nq: [74.0, 76.0, 75.0]}, {ct: [56.0], ms: [39.0], nq: [74.0, 76.0, 75.0]}]
    n_of = {("curatedtrec", "rag_token", "dev"): 50, ("msmarco", "rag_token", "test"): 10**6, ("nq", "rag_token", "test"): 10**6}
    before = {b.task: b for b in make_bands(center, others, n_of)}
    # replicates of two worlds, three fine-tune seeds each: CT's seeds spread by 16 points, MS-MARCO's by 0.5
    reps = [{ct: [48.0, 80.0, 64.0], ms: [40.0, 40.5, 39.5], nq: [1.0, 99.0, 50.0]},
            {ct: [60.0, 44.0, 76.0], ms: [41.0, 41.5, 40.5]}]
    after = {b.task: b for b in make_bands(center, others, n_of, reps)}
    sd, k = 16.0, band_multiplier(4, 2)  # pooled over the two replicates, 2 + 2 df; two such cells
    assert after["curatedtrec"].tolerance == pytest.approx(k * sd * 2 ** 0.5, abs=0.01)
    # 80 against 48 sat at 0.92 of the worlds' tolerance; the training SD puts it well inside
    assert abs(80.0 - 48.0) / before["curatedtrec"].tolerance > 0.9 > 0.5 > abs(80.0 - 48.0) / after["curatedtrec"].tolerance
    assert "training SD 16.00 pooled within the replicates (4 df)" in after["curatedtrec"].source
    assert "the tolerance" in after["curatedtrec"].source
    # MS-MARCO: the worlds spread more than training does; its band stays as it was
    assert after["msmarco"].tolerance == before["msmarco"].tolerance and "training SD 0.50" in after["msmarco"].source
    assert "the tolerance" not in after["msmarco"].source
    # replicates leave a several-seed cell (its own seeds measure its training SD) and every centre alone
    assert after["nq"] == before["nq"] and all(after[t].expected == before[t].expected for t in after)


def test_rag_bands_takes_replicates(tmp_path):
    centre, rep = tmp_path / "centre", tmp_path / "rep"
    fabricate(centre)
    fabricate(tmp_path / "other", shift={("nq", "bart", "test", "em"): 1.0})
    runs = dict(RUNS)
    runs[("nq", "bart", "test")] = {"em": [1.3, 21.3, 11.3]}  # the one-seed cell run with three seeds: SD 10
    fabricate(rep, runs=runs)
    out = tmp_path / "bands.yaml"
    assert main(["bands", "--center", str(centre), "--others", str(tmp_path / "other"), "--replicates", str(rep),
                 "--name", "fabricated", "--out", str(out)]) == 0
    header, bands = load_bands(out)
    bart = {b.cell: b for b in bands}[("nq", "bart", "test", "em")]
    assert bart.tolerance == pytest.approx(band_multiplier(2, 1) * 10 * 2 ** 0.5, abs=0.01)
    assert "replicate" in header["method"] and "training SD" in header["method"]


def test_a_band_that_would_span_the_whole_scale_is_listed_unchecked(tmp_path, capsys):
    """A one-seed cell whose training moves it by 40 points (SD) at one seed gets a calibrated band
    wider than 0-100: it could hold every value, so the band file lists it under unchecked: with its
    reason, and rag check says how many it left out."""
    centre, rep = tmp_path / "centre", tmp_path / "rep"
    files = fabricate(centre)
    fabricate(tmp_path / "other", shift={("nq", "bart", "test", "em"): 1.0})
    fabricate(rep, runs={**RUNS, ("nq", "bart", "test"): {"em": [1.3, 81.3, 41.3]}})
    out = tmp_path / "bands.yaml"
    assert main(["bands", "--center", str(centre), "--others", str(tmp_path / "other"), "--replicates", str(rep),
                 "--name", "fabricated", "--out", str(out)]) == 0
    header, bands = load_bands(out)
    assert ("nq", "bart", "test", "em") not in {b.cell for b in bands} and len(bands) == 5
    (entry,) = header["unchecked"]
    assert entry["cell"] == "nq/bart/test/em" and "training SD 40.00" in entry["why"] and entry["tolerance"] > 100
    assert "unchecked" in header["method"]
    capsys.readouterr()
    assert main(["check", "--bands", str(out), "--metrics", *map(str, files)]) == 0
    assert "1 cell(s) unchecked" in capsys.readouterr().out


def test_bands_hold_together_at_their_nominal_rate():
    """Calibration on synthetic experiments with a known training SD: bands made (make_bands) from
    three experiments of three seeds each hold every one of 100 cells on a fourth run (another
    machine: a new draw of training noise, the same test set) at least 95 % of the time, within the
    simulation's noise. A fixed 4 SD, as the bands were first made, fails far more often: an SD from
    6 df is often small by chance."""
    rng = np.random.default_rng(0)
    reps, cells, seeds, worlds = 400, 100, 3, 3
    sigma = rng.uniform(0.5, 3.0, cells)  # one fine-tune's SD, per cell
    truth = rng.uniform(20, 80, cells)
    draw = lambda: truth[:, None] + sigma[:, None] * rng.standard_normal((cells, seeds))  # noqa: E731
    as_experiment = lambda m: {("nq", f"v{i}", "test", "em"): [float(x) for x in m[i]] for i in range(cells)}  # noqa: E731
    n_of = {("nq", f"v{i}", "test"): 10**6 for i in range(cells)}  # no test-size floor
    k = band_multiplier(worlds * (seeds - 1), cells)
    miss_t = miss_4 = 0
    for _ in range(reps):
        runs = [as_experiment(draw()) for _ in range(worlds)]
        new = draw().mean(1)
        # |new - expected| in tolerances; the same in 4 SD (the SD is tolerance / k)
        gap = np.array([abs(new[int(b.variant[1:])] - b.expected) / b.tolerance for b in make_bands(runs[0], runs[1:], n_of)])
        miss_t += bool((gap > 1).any())
        miss_4 += bool((gap * k / 4 > 1).any())
    assert miss_t / reps <= 0.05 + 3 * (0.05 * 0.95 / reps) ** 0.5, miss_t / reps
    assert miss_4 / reps > 0.3, miss_4 / reps


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
    (centre / "config").mkdir()
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
    files = fabricate(tmp_path / "other_task", runs={("fever3", "bart", "test"): {"accuracy": [40.0]}})
    assert main(["check", "--bands", str(bands), "--metrics", *map(str, files)]) == 1
    assert "none of the" in capsys.readouterr().err


@pytest.mark.parametrize("entry,message", [
    ({"task": "nq"}, "missing variant"),
    ({"task": "nq", "variant": "bart", "split": "test", "metric": "em", "expected": 1, "tolerance": -1}, "'tolerance' must be"),
    ({"task": "nq", "variant": "bart", "split": "test", "metric": "em", "expected": "x", "tolerance": 1}, "'expected' must be"),
])
def test_a_bad_band_file_is_one_line_naming_the_entry(tmp_path, entry, message):
    from rag.errors import DataError

    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({"cells": [entry]}))
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
    bands.write_text(yaml.safe_dump({"cells": [{"task": "nq", "variant": "rag_token", "split": "test", "metric": "em",
                                                "expected": 85.0, "tolerance": 6.0, "source": "test"}]}))
    args = ["check", "--bands", str(bands), "--metrics", *map(str, metrics), "--predictions", *map(str, preds)]
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
    missing = tmp_path / "run" / "runs" / "msmarco" / "rag_sequence" / "seed1" / "test" / "predictions.jsonl"
    assert f"error: {missing}: missing (and 7 more): each run of {tmp_path / 'run'} writes its predictions" in err
    assert main(["check", "--bands", str(bands), "--experiment", str(tmp_path / "run"), "--predictions", "x.jsonl"]) == 2
    assert "--predictions pairs with --metrics" in capsys.readouterr().err
    assert main(["check", "--bands", str(bands), "--experiment", str(tmp_path / "nothing")]) == 2
    assert "no runs/<task>/<variant>/seed<seed>/<split>/metrics.json files" in capsys.readouterr().err


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
    bands.write_text(yaml.safe_dump({"cells": [{"task": "nq", "variant": "rag_token", "split": "test", "metric": "em",
                                                "expected": 100.0, "tolerance": 1.0, "source": "test"}]}))
    args = ["check", "--bands", str(bands), "--metrics", *map(str, metrics), "--predictions"]
    assert main(args + [str(p) for p in preds]) == 0
    capsys.readouterr()
    assert main(args + [str(p) for p in preds[::-1]]) != 0
    err = capsys.readouterr().err
    assert f"{preds[1]}: paired by position with {metrics[0]}, but it is run nq/rag_token/seed1/test, not nq/rag_sequence/seed1/test" in err
    assert len(err.strip().splitlines()) == 1
