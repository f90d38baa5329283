"""Tests for rag.metrics: each metric against hand arithmetic or a second implementation."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from rag import metrics as M
from rag.scoring import answer_match as AM
from rag.scoring import coco
from rag.scoring import ptb_tokenizer as PTB
from rag.scoring import qbleu as Q
from rag.cli import main
from rag.errors import ConfigError, DataError
from rag.keyspec import validate

HAS_JAVA = shutil.which("java") is not None


# ------------------------------------------------------------------------------ SQuAD EM


def test_normalize_answer_squad():
    # lower -> "the  café, zürich!"; strip punctuation -> "the  café zürich";
    # drop article -> "  café zürich"; collapse whitespace.
    assert AM.normalize_answer("The  Café, Zürich!") == "café zürich"
    assert AM.normalize_answer("An apple a day") == "apple day"
    # articles only as whole words: "theater" keeps its "the"
    assert AM.normalize_answer("Theater") == "theater"
    assert AM.normalize_answer("...!?") == ""


def test_exact_match_edge_cases():
    assert AM.exact_match("the Café Zürich.", ["cafe zurich", "Café  Zürich"])
    assert not AM.exact_match("Café Zürich", ["cafe zurich"])  # accents are not stripped
    assert not AM.exact_match("", ["Paris"])
    # punctuation-only prediction normalizes to "" and so equals a gold that is only an article
    assert AM.exact_match("?!", ["The"])
    assert not AM.exact_match("Paris", [])
    assert M.Scorer().compute("em", ["Paris", "london", ""], [["Paris, France", "paris"], ["London"], ["x"]]) == pytest.approx(
        200 / 3
    )


# ------------------------------------------------------------------------------ CuratedTrec regex


def test_regex_match_drqa_semantics():
    pats = ["Nagoya", r"(?:Old )?Faithful"]
    assert AM.regex_match("old faithful geyser", pats)  # IGNORECASE, match() at the start
    assert AM.regex_match("Faithful", pats)
    assert not AM.regex_match("It is Nagoya", pats)  # re.match is anchored at the start
    # "The Beatles": raw re.match fails (as in DrQA), the SQuAD-normalized "beatles" matches
    assert re.match("Beatles", "The Beatles", flags=re.I) is None
    assert AM.regex_match("The Beatles", ["Beatles"])
    assert not AM.regex_match("", ["Beatles"])
    assert AM.regex_match("Zürich", [r"z\wrich"])  # UNICODE: \w matches ü
    assert M.Scorer().compute("em_regex", ["1969", "in 1970"], [[r"19[56]\d"], [r"19[56]\d"]]) == 50.0


def test_regex_match_invalid_pattern_raises():
    with pytest.raises(DataError, match=re.escape("(unclosed")):
        AM.regex_match("anything", ["ok", "(unclosed"])


# ------------------------------------------------------------------------------ tokenizer

TOKENIZER_CASES = {
    # contractions: PTB splits the clitic
    "Don't stop, it's John's car.": "do n't stop it 's john 's car",
    "I can't, won't; shouldn't've": "i ca n't wo n't should n't 've",
    # hyphenated words stay whole; "--" and "-" are removed as punctuation
    "The state-of-the-art model -- costs $5.50 or 5%!": "the state-of-the-art model costs $ 5.50 or 5 %",
    # brackets come out lower-cased (-lrb-) and so survive coco-caption's punctuation filter
    "a (b) [c] {d}": "a -lrb- b -rrb- -lsb- c -rsb- -lcb- d -rcb-",
    "Café Zürich — “naïve” ‘x’": "café zürich naïve x",
    '"Hello," she said... U.S. Mr. Smith': "hello she said u.s. mr. smith",
    "Wait?! !!! 1,000 3.14 10:30": "wait ?! !!! 1,000 3.14 10:30",
    "?!.": "?!",
    # Java 3.4.1 behaviours (checked against the jar):
    "Washington, D.C.'s U.S.'s Mr.'s": "washington d.c. 's u.s. 's mr. 's",  # clitic after an abbreviation
    "At 5'11\" and 6'4\" or 5'11": "at 5 11 and 6 4 or 5 '11",  # feet and inches
    "at 7pm or 10am, 12:30pm": "at 7pm or 10am 12:30 pm",  # am/pm split only after a clock time
    "US$5 HK$3 US$5,000": "us$ 5 hk$ 3 us$ 5,000",  # letters + "$" before a number
    "rock'n'roll Rock'N'Roll fish'n'chips": "rock 'n' roll rock 'n' roll fish 'n' chips",
    "the 1,000-mile 1,000km race": "the 1,000-mile 1,000 km race",
    "...": "",
    "": "",
}


@pytest.mark.parametrize("text,expected", list(TOKENIZER_CASES.items()))
def test_python_tokenizer_documented_outputs(text, expected):
    assert " ".join(PTB.ptb_tokenize(text)) == expected


@pytest.mark.skipif(not HAS_JAVA, reason="java not on PATH: cannot run Stanford PTBTokenizer")
def test_python_tokenizer_agrees_with_java_ptb():
    texts = [t for t in TOKENIZER_CASES if t.strip() and t != "..."] + [
        "Who's there? Y'all ready? It's 12:30pm.",
        "He was born on 4/5/1990 in St. Louis, Mo. Price: £3",
    ]
    assert PTB.tokenize_batch(texts, "python") == PTB.tokenize_batch(texts, "ptb")


EMOTICON = "I <3 NLP :)"


# Known differences of the pure-Python tokenizer (documented in ptb_tokenize): Java's output first.
KNOWN_DIFFERENCES = {
    "1,000s.": ("1,000 s.", "1,000 s"),
    "5'11\"-tall": ("5 11 tall", "5'11\"-tall"),
    "7:30p.m.": ("7:30 p.m.", "7:30p.m"),
}


def test_python_tokenizer_known_difference_documented():
    # Documented difference: the fallback does not recognise emoticons.
    assert PTB.ptb_tokenize(EMOTICON) == ["i", "<3", "nlp", "-rrb-"]
    for text, (_, python) in KNOWN_DIFFERENCES.items():
        assert " ".join(PTB.ptb_tokenize(text)) == python


@pytest.mark.skipif(not HAS_JAVA, reason="java not on PATH: cannot run Stanford PTBTokenizer")
def test_known_differences_are_still_differences():
    texts = list(KNOWN_DIFFERENCES)
    assert PTB.tokenize_batch(texts, "ptb") == [java for java, _ in KNOWN_DIFFERENCES.values()]


@pytest.mark.skipif(not HAS_JAVA, reason="java not on PATH: cannot run Stanford PTBTokenizer")
def test_java_ptb_differs_on_emoticons():
    assert PTB.tokenize_batch([EMOTICON], "ptb") == ["i < 3 nlp -rrb-"]
    assert PTB.tokenize_batch([EMOTICON], "python") != PTB.tokenize_batch([EMOTICON], "ptb")


def test_unknown_tokenizer():
    with pytest.raises(ConfigError, match="python"):
        coco.bleu1(["a"], [["a"]], tokenizer="spacy")


# ------------------------------------------------------------------------------ BLEU-1


def test_bleu1_hand_computed_single():
    # hyp: the cat sat on the mat (6) ; ref: the cat is on the mat (6)
    # clipped unigram matches: the 2, cat 1, on 1, mat 1, sat 0 -> 5 of 6; BP = 1
    assert coco.bleu1(["The cat sat on the mat."], [["the cat is on the mat"]]) == pytest.approx(500 / 6, rel=1e-6)


def test_bleu1_hand_computed_corpus_brevity_penalty():
    # ex1: 5 correct / 6 guessed, ref len 6 ; ex2: "a dog" vs "a big dog barked": 2 / 2, ref len 4
    # corpus: 7 / 8, test len 8, ref len 10 -> BP = exp(1 - 10/8)
    expected = 100 * 7 / 8 * math.exp(1 - 10 / 8)
    got = coco.bleu1(["the cat sat on the mat", "a dog"], [["the cat is on the mat"], ["a big dog barked"]])
    assert got == pytest.approx(expected, rel=1e-6)


def test_bleu1_multiple_refs_closest_length():
    # refs lengths 4 and 2; closest to hyp length 2 is 2 -> BP 1; a, dog both matched -> 100
    assert coco.bleu1(["a dog"], [["a big dog barked", "dog a"]]) == pytest.approx(100.0, rel=1e-6)
    # only the long reference: BP = exp(1 - 4/2)
    assert coco.bleu1(["a dog"], [["a big dog barked"]]) == pytest.approx(100 * math.exp(-1), rel=1e-6)


def test_bleu1_empty_and_punctuation_only():
    assert coco.bleu1([""], [["some answer"]]) == pytest.approx(0.0, abs=1e-6)
    assert coco.bleu1(["..."], [["some answer"]]) == pytest.approx(0.0, abs=1e-6)


def test_bleu1_agrees_with_sacrebleu():
    from sacrebleu.metrics import BLEU

    preds = ["Café Zürich is in Switzerland.", "the quick brown fox jumps", "yes , it is safe", "no"]
    refs = [["The Café Zürich is located in Zurich, Switzerland."], ["a quick brown dog jumps high"],
            ["Yes, it's safe to eat."], ["No, it is not."]]
    hyp_tok, refs_tok = coco.tokenize_pairs(preds, refs, "python")
    sb = BLEU(max_ngram_order=1, tokenize="none", smooth_method="none").corpus_score(
        hyp_tok, [[r[0] for r in refs_tok]]
    )
    assert coco.bleu1(preds, refs) == pytest.approx(sb.score, rel=1e-6)


# ------------------------------------------------------------------------------ ROUGE-L


def rouge_l(predictions, references):
    return M.Scorer().compute("rougeL", predictions, references)


def qbleu1(predictions, references, **weights):
    return M.Scorer(qbleu1=weights or None).compute("qbleu1", predictions, references)


def _f_beta(p, r, beta=1.2):
    return 0.0 if p == 0 or r == 0 else (1 + beta**2) * p * r / (r + beta**2 * p)


def test_rouge_l_hand_computed():
    # hyp "the cat sat" vs ref "the cat sat on the mat": LCS 3, P = 3/3, R = 3/6
    # F = 2.44 * 1 * 0.5 / (0.5 + 1.44 * 1) = 1.22 / 1.94
    assert rouge_l(["The cat sat."], [["the cat sat on the mat"]]) == pytest.approx(100 * 1.22 / 1.94)


def test_rouge_l_max_precision_and_recall_separately():
    # coco-caption takes max P and max R over refs independently:
    # ref1 "a b": LCS 2 -> P 2/4, R 1 ; ref2 "a b c d e f g h": LCS 4 -> P 1, R 4/8 ; -> P 1, R 1
    assert rouge_l(["a b c d"], [["a b", "a b c d e f g h"]]) == pytest.approx(100.0)


def test_rouge_l_empty_prediction_and_mean():
    assert rouge_l([""], [["an answer"]]) == 0.0
    # mean over examples: (100 + 0) / 2
    assert rouge_l(["x y", "z"], [["x y"], ["w"]]) == pytest.approx(50.0)


def test_rouge_l_agrees_with_rouge_score_lcs():
    from rouge_score import rouge_scorer

    preds = ["the quick brown fox jumps over the lazy dog", "a b c", "one two three four"]
    refs = ["the fast brown fox leaps over a lazy dog", "c b a", "four three one two five"]
    sc = rouge_scorer.RougeScorer(["rougeL"])
    expected = []
    for p, r in zip(preds, refs):
        s = sc.score(r, p)["rougeL"]
        expected.append(_f_beta(s.precision, s.recall))
    assert rouge_l(preds, [[r] for r in refs]) == pytest.approx(100 * sum(expected) / len(expected))


# ------------------------------------------------------------------------------ Q-BLEU-1


README_WEIGHTS = {"w_ner": 0.6, "w_qt": 0.2, "w_re": 0.1, "delta": 0.7}
HEAD_VECTORS = json.loads((Path(__file__).parent / "data" / "qbleu_head_vectors.json").read_text(encoding="utf-8"))


def test_qbleu_default_weights():
    assert Q.QBLEU_DEFAULT_WEIGHTS == {"w_ner": 0.41, "w_qt": 0.20, "w_re": 0.20, "delta": 0.66}
    assert Q.QBLEU_WEIGHT_SETS["readme"] == README_WEIGHTS
    assert Q.QBleuWeights().w_sw == pytest.approx(0.19)
    assert Q.QBleuWeights().weights() == Q.QBLEU_DEFAULT_WEIGHTS
    weights = lambda w: validate(Q.QBleuWeights, w, "metrics.qbleu1")  # noqa: E731
    with pytest.raises(ConfigError, match=r"^config key 'metrics.qbleu1': w_ner \+ w_qt \+ w_re = 1.1 > 1"):
        weights({"w_ner": 0.9, "w_qt": 0.1, "w_re": 0.1})
    with pytest.raises(ConfigError, match=r"^config key 'metrics.qbleu1.delta': 1.5 is greater than the maximum of 1$"):
        weights({"delta": 1.5})
    with pytest.raises(ConfigError, match=r"^unknown config key 'metrics.qbleu1.w_stop'$"):
        weights({"w_stop": 0.1})


def test_qbleu_components_like_authors_script():
    c = Q.qbleu_components("What city hosted the Olympics in 1992?")
    assert c == {"imp": "hosted 1992?", "ner": "Olympics", "qt": "What city", "sw": "the in"}


def test_qbleu1_reproduces_authors_test_vector():
    # The authors' head script (Answerability-Metric ec5cf5e) on hyp "Is this a great question?",
    # ref "Is this a good question?", ner 0.6, qt 0.2, re 0.1, delta 0.7: 0.905 (run here with Java;
    # also the first pair of tests/data/qbleu_head_vectors.json with these weights). By hand:
    # ner "Is"/"Is" -> 1; qt ""/"" both empty -> 1 (head rule; the Oct 2018 version gave 0 and
    # 0.765); imp "great question?"/"good question?" -> 0.5; sw "is this a" both -> 1.
    # Answerability = 0.6*1 + 0.2*1 + 0.1*0.5 + 0.1*1 = 0.95; BLEU-1 = 4/5 = 0.8
    # Q-BLEU-1 = 0.7*0.95 + 0.3*0.8 = 0.905 (BLEU's 1e-9 smoothing moves it by ~1e-9)
    got = qbleu1(["Is this a great question?"], [["Is this a good question?"]], **README_WEIGHTS)
    assert got == pytest.approx(90.5, abs=1e-4)


def test_qbleu1_hand_computed_mean_and_edges():
    # "Who wrote Hamlet?" vs "Who wrote Macbeth?": qt "Who"/"Who" -> 1; ner (first word is a
    # question word, dropped) "Hamlet?"/"Macbeth?" -> 0; imp "wrote"/"wrote" -> 1; sw both empty -> 1.
    # Answerability = 0.1*1 + 0.6*0 + 0.2*1 + 0.1*1 = 0.4 ; BLEU-1 = 2/3
    # Q-BLEU-1 = 0.7*0.4 + 0.3*2/3 = 0.48
    assert qbleu1(["Who wrote Hamlet?"], [["Who wrote Macbeth?"]], **README_WEIGHTS) == pytest.approx(48.0, abs=1e-4)
    assert qbleu1(
        ["Who wrote Hamlet?", "Is this a great question?"],
        [["Who wrote Macbeth?"], ["Is this a good question?"]], **README_WEIGHTS,
    ) == pytest.approx((48.0 + 90.5) / 2, abs=1e-4)
    # identical question -> 1.0, also for a clue with no question word (qt empty on both sides)
    q = "What is the capital of France?"
    clue = "This 'Father of Our Country' never chopped down a cherry tree"
    assert qbleu1([q], [[q]]) == pytest.approx(100.0, abs=1e-4)
    assert qbleu1([clue], [[clue]]) == pytest.approx(100.0, abs=1e-4)
    # an empty prediction scores 0 (the authors' script crashes on it), even where components
    # would be empty on both sides
    assert qbleu1([""], [[q]]) == 0.0
    assert qbleu1(["  "], [[clue]]) == 0.0
    assert qbleu1(["?"], [[q]]) == pytest.approx(0.0, abs=1e-4)
    # several references: the best one counts
    assert qbleu1(["Who wrote Hamlet?"], [["Who wrote Macbeth?", q]], **README_WEIGHTS) == pytest.approx(48.0, abs=1e-4)


@pytest.mark.parametrize("tokenizer", [
    "python",
    pytest.param("ptb", marks=pytest.mark.skipif(not HAS_JAVA, reason="java not on PATH: cannot run Stanford PTBTokenizer")),
])
@pytest.mark.parametrize("weights", sorted(HEAD_VECTORS["weights"]))
def test_qbleu1_equals_authors_head_script(tokenizer, weights):
    """46 examples (53 reference lines) scored by the authors' head script with Java's PTB
    tokenizer; where the values came from: the file's "about". Both tokenizers must agree with
    it within 1e-6 per line and per example (max over references)."""
    w = HEAD_VECTORS["weights"][weights]
    examples = HEAD_VECTORS["examples"]
    assert len(examples) >= 40
    flat = [(e["hypothesis"], r) for e in examples for r in e["references"]]
    expected = [x for e in examples for x in e["expected"][weights]]
    got = Q.qbleu1_scores([h for h, _ in flat], [[r] for _, r in flat], tokenizer=tokenizer, **w)
    assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-6
    got_ex = Q.qbleu1_scores([e["hypothesis"] for e in examples], [e["references"] for e in examples],
                             tokenizer=tokenizer, **w)
    assert max(abs(a - max(e["expected"][weights])) for a, e in zip(got_ex, examples)) < 1e-6


def test_qbleu1_through_compute_uses_configured_weights():
    p, t = ["Who wrote Hamlet?"], [["Who wrote Macbeth?"]]
    assert M.Scorer(qbleu1=README_WEIGHTS).compute("qbleu1", p, t) == pytest.approx(48.0, abs=1e-4)
    assert M.Scorer().compute("qbleu1", p, t) == M.Scorer(qbleu1=Q.QBLEU_DEFAULT_WEIGHTS).compute("qbleu1", p, t)


# ------------------------------------------------------------------------------ accuracy, distinct, recall


def test_accuracy_first_gold_exact_string():
    assert M.Scorer().compute("accuracy", ["SUPPORTS", "REFUTES", "supports"], [["SUPPORTS"], ["NOT ENOUGH INFO", "REFUTES"], ["SUPPORTS"]]) == (
        pytest.approx(100 / 3)
    )


def test_trigram_distinct():
    # "a b c d" -> (a b c), (b c d); "a b c" -> (a b c): 2 distinct of 3
    assert M.trigram_distinct(["a b c d", "a b c"]) == pytest.approx(200 / 3)
    # tri-grams do not span texts: "a b" + "c" has none
    assert M.trigram_distinct(["a b", "c"]) == 0.0
    assert M.trigram_distinct([]) == 0.0
    assert M.Scorer().compute("trigram_distinct", ["x y z x y z"], [[]]) == pytest.approx(75.0)  # 3 of 4


def test_answer_in_text():
    text = "The Café Zürich opened in 1911, near the concatenated lake."
    assert AM.answer_in_text(text, ["nope", "café zürich"])
    assert not AM.answer_in_text(text, ["zurich"])  # accents kept (DPR NFD tokens keep marks)
    assert not AM.answer_in_text(text, ["cat"])  # token boundaries
    assert AM.answer_in_text(text, ["1911 ,"])  # punctuation is a token
    assert AM.answer_in_text(text, [r"19\d\d"], regex=True)
    assert not AM.answer_in_text(text, [r"^1911"], regex=True)
    with pytest.raises(DataError, match=re.escape("[a-")):
        AM.answer_in_text(text, ["[a-"], regex=True)


# ------------------------------------------------------------------------------ dispatch


def test_compute_dispatch_and_errors():
    assert tuple(M.METRICS) == ("em", "em_regex", "bleu1", "rougeL", "qbleu1", "accuracy", "trigram_distinct")
    assert M.Scorer().compute("bleu1", ["the cat sat on the mat"], [["the cat is on the mat"]]) == pytest.approx(
        500 / 6, rel=1e-6
    )
    assert M.Scorer().compute("rougeL", ["x y"], [["x y"]]) == pytest.approx(100.0)
    assert M.Scorer().compute("accuracy", ["A"], [["A"]]) == 100.0
    with pytest.raises(ConfigError) as exc:
        M.Scorer().compute("f1", ["a"], [["a"]])
    for name in M.METRICS:
        assert name in str(exc.value)
    with pytest.raises(DataError):
        M.Scorer().compute("em", [], [])
    with pytest.raises(DataError):
        M.Scorer().compute("em", ["a", "b"], [["a"]])


@pytest.mark.parametrize("metric", list(M.METRICS))
def test_subset_scorer_equals_compute_on_the_subset(metric):
    """The bootstrap's scorer of resamples (each example counted once) gives compute()'s score of
    the resample to the last bit, repeats, one reference or several, empty predictions included."""
    import numpy as np

    preds = ["the cat sat on the mat", "who wrote the raven", "", "A", "paris is the capital of france",
             "the capital of ziglal is morvan", "what river flows through Velora ?", "x y z w"]
    targets = [["the cat is on the mat", "a cat sat on a mat"], ["who is the author of the raven"], ["nothing"],
               ["A"], ["Paris"], ["the capital of ziglal is morvan city"], ["which river crosses Velora ?"],
               ["x y", "z w q", "x y z w"]]
    if metric == "em_regex":
        targets = [[re.escape(t[0]) + "|cat"] + t[1:] for t in targets]
    scorer = M.Scorer().subset(metric, preds, targets)
    for ix in [list(range(len(preds))), *np.random.default_rng(1).integers(0, len(preds), size=(20, len(preds)))]:
        expected = M.Scorer().compute(metric, [preds[i] for i in ix], [targets[i] for i in ix])
        assert scorer(ix) == expected  # exactly: the report's ± cells must not move
    with pytest.raises(DataError):
        scorer([])
    with pytest.raises(DataError):  # checked as compute() checks, before any resample
        M.Scorer().subset(metric, [], [])
    if metric != "trigram_distinct":
        with pytest.raises(DataError):
            M.Scorer().subset(metric, preds, targets[:-1])


def test_subset_scorer_unknown_metric():
    with pytest.raises(ConfigError, match="valid metrics"):
        M.Scorer().subset("f1", ["a"], [["a"]])


def test_compute_never_falls_back_to_accuracy(monkeypatch):
    """Scoring goes through the name -> metric class map: every listed metric has its own class,
    an unknown name raises, naming the metric, and a class registered under a name scores it."""
    for name, cls in M.METRICS.items():
        assert cls.name == name and issubclass(cls, M.Metric)
        M.Scorer().compute(name, ["a b c d"], [["a b c d"]])
    with pytest.raises(ConfigError, match="'f1'"):
        M.Scorer().compute("f1", ["A"], [["A"]])

    class Constant(M.Metric):
        name = "f1"

        def score(self, predictions, targets):
            return 42.0

    monkeypatch.setitem(M.METRICS, "f1", Constant)
    assert M.Scorer().compute("f1", ["A"], [["A"]]) == 42.0


# ------------------------------------------------------------------------------ CLI


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_cli_score_prints_one_json_line(tmp_path, capsys):
    p = _write(tmp_path / "p.jsonl", [{"id": "q2", "prediction": "london"}, {"id": "q1", "prediction": "Paris"}])
    r = _write(tmp_path / "r.jsonl", [{"id": "q1", "targets": ["paris"]}, {"id": "q2", "targets": ["Rome"]}])
    assert main(["score", "--metric", "em", "--predictions", p, "--references", r]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    assert json.loads(out[0]) == {"metric": "em", "score": 50.0, "n": 2}


def test_cli_mismatched_ids(tmp_path, capsys):
    p = _write(tmp_path / "p.jsonl", [{"id": "q1", "prediction": "a"}, {"id": "q9", "prediction": "b"}])
    r = _write(tmp_path / "r.jsonl", [{"id": "q1", "targets": ["a"]}, {"id": "q2", "targets": ["b"]}])
    assert main(["score", "--metric", "em", "--predictions", p, "--references", r]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "q9" in err and "r.jsonl" in err


def test_cli_duplicate_id_and_unknown_metric(tmp_path, capsys):
    p = _write(tmp_path / "p.jsonl", [{"id": 1, "prediction": "a"}, {"id": 1, "prediction": "b"}])
    r = _write(tmp_path / "r.jsonl", [{"id": 1, "targets": ["a"]}])
    assert main(["score", "--metric", "em", "--predictions", p, "--references", r]) == 2
    err = capsys.readouterr().err
    assert "duplicate id 1" in err and "p.jsonl" in err
    p2 = _write(tmp_path / "p2.jsonl", [{"id": 1, "prediction": "a"}])
    assert main(["score", "--metric", "bleu", "--predictions", p2, "--references", r]) == 2
    assert "rougeL" in capsys.readouterr().err


def test_cli_missing_field(tmp_path, capsys):
    p = _write(tmp_path / "p.jsonl", [{"id": 1, "pred": "a"}])
    r = _write(tmp_path / "r.jsonl", [{"id": 1, "targets": ["a"]}])
    assert main(["score", "--metric", "em", "--predictions", p, "--references", r]) == 2
    assert "p.jsonl:1" in capsys.readouterr().err


def test_scorer_of_recorded_options():
    """A report scores with the options a run recorded (metrics.json ``metric_options``); what a run
    did not record (its metrics read no options) is the default."""
    w = {"w_ner": 0.6, "w_qt": 0.2, "w_re": 0.1, "delta": 0.7}
    assert M.Scorer.of({"tokenizer": "python", "qbleu1": w}) == M.Scorer("python", w)
    assert M.Scorer.of(None) == M.Scorer.of({}) == M.Scorer()
    p, t = ["who wrote the book"], [["who wrote this novel"]]
    assert M.Scorer.of({"qbleu1": w}).compute("qbleu1", p, t) == M.Scorer(qbleu1=w).compute("qbleu1", p, t)
    assert M.Scorer.of({"qbleu1": w}).compute("qbleu1", p, t) != M.Scorer().compute("qbleu1", p, t)
