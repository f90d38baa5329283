"""Reliability: what a config or the data may put in the report's links and text (``pytest -m reliability``).

Fault tried                                      | what the harness does (and the test checking it)
------------------------------------------------ | ------------------------------------------------------------------
``tracking.ui_url: javascript:...`` (or data:,   | ConfigError "config key 'tracking.ui_url': ... does not match
  a bare host)                                   | https?://..." when the config loads: no link of another scheme
A prediction holding U+202E (right-to-left       | report.html shows U+FFFD in their place, as for a NUL: C0 and C1
  override) or U+0085 (C1's next line)           | controls and the bidirectional controls never reach the page
"""

from __future__ import annotations

import pytest

from rag.config import load_config
from rag.errors import ConfigError
from tests.test_reliability_faults import _byo, report_of_a_prediction

pytestmark = pytest.mark.reliability


@pytest.mark.parametrize("url", ["javascript:alert(1)", "data:text/html,x", "127.0.0.1:5000", "ftp://host/x", "http://"])
def test_a_ui_url_of_another_scheme_is_refused_when_the_config_loads(url):
    cfg = _byo()
    cfg.setdefault("tracking", {})["ui_url"] = url
    with pytest.raises(ConfigError, match=r"^config key 'tracking.ui_url': .* does not match https\?://"):
        load_config(cfg)
    cfg["tracking"]["ui_url"] = "https://mlflow.example.org:8443/ui"
    assert load_config(cfg)["tracking"]["ui_url"] == "https://mlflow.example.org:8443/ui"


def test_bidirectional_and_c1_controls_of_the_data_do_not_reach_the_report(tmp_path):
    html = report_of_a_prediction(tmp_path, "left\u202eright\u0085next\u2066isolated\u2069")
    assert not set("\u202e\u0085\u2066\u2069") & set(html)
    assert "left\ufffdright\ufffdnext\ufffdisolated\ufffd" in html
