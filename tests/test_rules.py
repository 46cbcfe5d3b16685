"""The ``[detection]`` and ``[alerts]`` tables (rtax.analysis.rules): defaults, a full table read
back, and every mistake one line naming its key, through `rtax config check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtax import cli
from rtax.analysis.changepoint import Binseg, Scan
from rtax.analysis.rules import DEFAULT_RULES, Rule
from rtax.core.paths import checkout_root
from rtax.settings import config

BASE = "[[substrates]]\nname = 'local'\nkind = 'local'\n"


def _load(tmp_path: Path, text: str) -> config.Config:
    file = tmp_path / "c.toml"
    file.write_text(BASE + text)
    return config.load(file)


def test_defaults_detect_changes_and_send_nothing(tmp_path: Path) -> None:
    conf = _load(tmp_path, "")
    assert conf.alerts.rules == DEFAULT_RULES
    assert conf.alerts.webhook is None and conf.alerts.webhook_env is None
    assert conf.detection.latency == Binseg() and conf.detection.window == 200
    assert conf.detection.success == Scan()
    assert conf.detection.baseline_samples == 100 and conf.alerts.quorum == 2


def test_a_full_table_is_read_back(tmp_path: Path) -> None:
    conf = _load(
        tmp_path,
        """
[detection]
interval = "30s"
window = 100
latency_threshold = 5.5
min_segment = 4
success_threshold = 3.5
success_min_segment = 3
recovery_samples = 6
baseline_samples = 50
[alerts]
quorum = 3
webhook_env = "RTAX_WEBHOOK"
cooldown = "1h"
timeout = "3s"
backoff = "10s"
max_backoff = "15m"
[[alerts.rules]]
name = "slow-start"
metric = "time_to_first_command"
p95_above = "30s"
samples = 10
substrates = ["local"]
[[alerts.rules]]
name = "failing"
success_below = 0.9
[[alerts.rules]]
name = "stale"
stale_after = "2h"
[[alerts.rules]]
name = "shift"
metric = "episode"
change_above = 2
""",
    )
    d, a = conf.detection, conf.alerts
    assert (d.interval_s, d.window, d.recovery_samples, d.baseline_samples) == (30, 100, 6, 50)
    assert d.latency == Binseg(threshold=5.5, min_segment=4)
    assert d.success == Scan(threshold=3.5, min_segment=3)
    assert a.quorum == 3
    assert (a.webhook_env, a.cooldown_s, a.timeout_s, a.backoff_s, a.max_backoff_s) == (
        "RTAX_WEBHOOK",
        3600,
        3,
        10,
        900,
    )
    assert a.rules == (
        Rule("slow-start", "time_to_first_command", "p95_above", 30.0, 10, ("local",)),
        Rule("failing", "success_rate", "success_below", 0.9),
        Rule("stale", "staleness", "stale_after", 7200.0),
        Rule("shift", "episode", "change_above", 2.0),
    )


def test_the_shipped_configuration_has_rules() -> None:
    conf = config.load(checkout_root() / "rtax.toml")
    conditions = {r.condition for r in conf.alerts.rules}
    assert {"change_above", "stale_after"} <= conditions


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("detection = 1\n", "detection"),
        ("[detection]\nwindow = 5\n", "detection.window"),
        ("[detection]\nlatency_threshold = -1\n", "detection.latency_threshold"),
        ("[detection]\nthreshold = 2.0\n", "detection.threshold"),
        ("[detection]\nmin_log_sigma = 0.05\n", "detection.min_log_sigma"),
        ("[detection]\nbaseline_samples = 200\n", "detection.baseline_samples"),
        ("[alerts]\nquorum = 0\n", "alerts.quorum"),
        (
            "[[alerts.rules]]\nname = 'r'\nmetric = 'episode'\np95_above = '1s'\nsamples = 201\n",
            "alerts.rules.r.samples",
        ),
        ("[detection]\ninterval = '10ms'\n", "detection.interval"),
        ("[detection]\nmin_segment = 150\n", "detection.min_segment"),
        ("[detection]\ndrift = 0.5\n", "detection.drift"),
        ("[detection]\nwindow = 20\nrecovery_samples = 30\n", "detection.recovery_samples"),
        ("[alerts]\nwebhook = 'ftp://x'\n", "alerts.webhook"),
        ("[alerts]\nwebhook_env = 'not a var'\n", "alerts.webhook_env"),
        ("[alerts]\nwebhook = 'http://a'\nwebhook_env = 'A'\n", "alerts.webhook"),
        ("[alerts]\ncooldown = 'soon'\n", "alerts.cooldown"),
        ("[alerts]\ntimeout = 0\n", "alerts.timeout"),
        ("[alerts]\nretries = 3\n", "alerts.retries"),
        ("[alerts]\nrules = 1\n", "alerts.rules"),
        ("[[alerts.rules]]\nstale_after = '1h'\n", "alerts.rules[0].name"),
        ("[[alerts.rules]]\nname = 'r'\n", "alerts.rules.r"),
        (
            "[[alerts.rules]]\nname = 'r'\nstale_after = '1h'\nsuccess_below = 0.5\n",
            "alerts.rules.r",
        ),
        ("[[alerts.rules]]\nname = 'r'\np95_above = '1s'\n", "alerts.rules.r.metric"),
        (
            "[[alerts.rules]]\nname = 'r'\nmetric = 'wall'\nchange_above = 2\n",
            "alerts.rules.r.metric",
        ),
        ("[[alerts.rules]]\nname = 'r'\nsuccess_below = 1.5\n", "alerts.rules.r.success_below"),
        (
            "[[alerts.rules]]\nname = 'r'\nmetric = 'episode'\nchange_above = 0.5\n",
            "alerts.rules.r.change_above",
        ),
        ("[[alerts.rules]]\nname = 'r'\nstale_after = 'later'\n", "alerts.rules.r.stale_after"),
        (
            "[[alerts.rules]]\nname = 'r'\nstale_after = '1h'\nsamples = 0\n",
            "alerts.rules.r.samples",
        ),
        (
            "[[alerts.rules]]\nname = 'r'\nstale_after = '1h'\nsubstrates = ['nope']\n",
            "alerts.rules.r.substrates",
        ),
        (
            "[[alerts.rules]]\nname = 'r'\nstale_after = '1h'\nlevel = 'page'\n",
            "alerts.rules.r.level",
        ),
        (
            "[[alerts.rules]]\nname = 'r'\nstale_after = '1h'\n[[alerts.rules]]\nname = 'r'\n"
            "stale_after = '2h'\n",
            "alerts.rules.r",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str
) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(BASE + text)
    with pytest.raises(config.ConfigError) as info:
        config.load(file)
    assert any(key in problem for problem in info.value.problems), info.value.problems
    assert cli.main(["config", "check", "--config", str(file)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith("rtax config: error: ") for line in lines)
    assert any(key in line for line in lines)
