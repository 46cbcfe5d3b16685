"""The example Prometheus rules for rtax's objectives (docs/prometheus/slo-rules.yml): Prometheus's
own `promtool` accepts them and passes their unit test (counters worked out by hand in
docs/prometheus/slo-rules.test.yml), and their alert pairs are rtax's defaults
(`rtax.analysis.slo.DEFAULT_BURN`) over the metrics `/metrics` serves.

Needs Debian's `promtool` (the `prometheus` package, scripts/ensure-prometheus.sh): skipped
without it, a failure under CI=true."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from polling import DEADLINE_S
from rtax.analysis.slo import DEFAULT_BURN, span
from rtax.service.prometheus import NAMES

RULES = Path(__file__).resolve().parent.parent / "docs" / "prometheus" / "slo-rules.yml"
UNIT = RULES.with_name("slo-rules.test.yml")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    reason = "no promtool binary (Debian's `prometheus` package)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI requires the promtool test: {reason}")
    pytest.skip(f"{reason}; `make test` as root installs it")


def _run(*args: str) -> None:
    done = subprocess.run(
        [_promtool(), *args],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_checks_the_rules() -> None:
    _run("check", "rules", RULES.name)


def test_promtool_runs_their_unit_test() -> None:
    _run("test", "rules", UNIT.name)


def test_the_alerts_are_rtax_default_pairs_over_served_metrics() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    alerts = [r for r in rules if "alert" in r]
    pairs = set()
    for alert in alerts:
        burning = r"rtax_slo:burn_rate:rate(\w+) >= ([\d.]+)"
        found = re.fullmatch(f"{burning} and {burning}", alert["expr"].strip())
        assert found, alert["expr"]
        long, factor, short, again = found.groups()
        assert factor == again and alert["labels"]["pair"] == f"{factor}x {long}/{short}"
        pairs.add((long, short, float(factor)))
    assert pairs == {(span(b.long_s), span(b.short_s), b.factor) for b in DEFAULT_BURN}
    used = {n for r in rules for n in re.findall(r"\brtax_[a-z_]+\b(?!:)", r["expr"])}
    assert used <= set(NAMES), used - set(NAMES)  # only what rtax serves (and recorded rules)
    recorded = {r["record"] for r in rules if "record" in r}
    windows = {w for b in DEFAULT_BURN for w in (span(b.long_s), span(b.short_s))}
    assert {f"rtax_slo:burn_rate:rate{w}" for w in windows} <= recorded
