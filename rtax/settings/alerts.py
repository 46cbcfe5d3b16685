"""The ``[detection]``, ``[alerts]`` and ``[status]`` tables: when a change opens an incident,
where its alert goes, and what the status board calls degraded or down (docs/alerts.md).

Why here and the types in `rtax.analysis` (`rules.Detection`, `rules.Alerts`, `rules.Rule`,
`status.StatusRules`): the pure detection and status code reads those types and must not import
the settings, while reading the tables from the file is the configuration's job, one line per
mistake naming its key. Every rule has exactly one condition, so an incident always names the
one rule that opened it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from rtax.analysis.rules import CONDITIONS, LATENCY_METRICS, Alerts, Detection, Rule
from rtax.analysis.status import StatusRules
from rtax.core.checks import (
    Bad,
    duration_at_least,
    is_env_name,
    is_positive,
    is_text,
    is_whole,
    names,
    positive_duration,
    unknown_keys,
)

_RULE_KEYS = frozenset({"name", "metric", "samples", "substrates", *CONDITIONS})
_URL = re.compile(r"^https?://[^\s]+$")


#: Keys of ``[detection]`` that no longer exist, and what to write instead.
_GONE = {
    "threshold": "renamed latency_threshold, and its meaning changed: the rank statistic's "
    "threshold (5.0 by default; docs/alerts.md#detection)",
    "min_log_sigma": "no longer used: the rank-based detector needs no noise floor "
    "(docs/alerts.md#detection)",
    "min_success_sigma": "no longer used: success is tested exactly (docs/alerts.md#detection)",
}


def parse_detection(raw: Any, bad: Bad) -> Detection:
    """The ``[detection]`` table; each mistake reported through `bad`."""
    found = Detection()
    if not isinstance(raw, dict):
        bad("detection", "must be a table")
        return found
    known = {"interval", "window", "latency_threshold", "min_segment", "success_threshold"}
    known |= {"success_min_segment", "recovery_samples", "baseline_samples"}
    for key in sorted(set(raw) & set(_GONE)):
        bad(f"detection.{key}", _GONE[key])
    unknown_keys(raw, "detection", known | set(_GONE), bad)
    if "interval" in raw:
        try:
            found = replace(found, interval_s=duration_at_least(raw["interval"], 1))
        except ValueError as exc:
            bad("detection.interval", str(exc))
    defaults = {
        "window": (found.window, 20),
        "min_segment": (found.latency.min_segment, 2),
        "success_min_segment": (found.success.min_segment, 1),
        "recovery_samples": (found.recovery_samples, 1),
        "baseline_samples": (found.baseline_samples, 2),
    }
    values: dict[str, Any] = {}
    for key, (default, least) in defaults.items():
        value = raw.get(key, default)
        if not is_whole(value, low=least):
            bad(f"detection.{key}", f"must be a whole number >= {least}")
        values[key] = value if is_whole(value, low=least) else default
    for key, default in (
        ("latency_threshold", found.latency.threshold),
        ("success_threshold", found.success.threshold),
    ):
        values[key] = default
        if key in raw:
            if is_positive(raw[key]):
                values[key] = float(raw[key])
            else:
                bad(f"detection.{key}", "must be a number > 0")
    window = values["window"]
    if values["recovery_samples"] > window:
        bad("detection.recovery_samples", f"must be at most the window ({window})")
    if values["baseline_samples"] >= window:
        bad("detection.baseline_samples", f"must be less than the window ({window})")
    if 2 * values["min_segment"] > window:
        bad("detection.min_segment", f"must be at most half the window ({window})")
    return replace(
        found,
        window=window,
        latency=replace(
            found.latency, threshold=values["latency_threshold"], min_segment=values["min_segment"]
        ),
        success=replace(
            found.success,
            threshold=values["success_threshold"],
            min_segment=values["success_min_segment"],
        ),
        recovery_samples=values["recovery_samples"],
        baseline_samples=values["baseline_samples"],
    )


def parse_alerts(raw: Any, bad: Bad, substrates: set[str], window: int = 200) -> Alerts:
    """The ``[alerts]`` table and its ``[[alerts.rules]]``; each mistake through `bad`.
    `window`: the detection window, which a threshold rule's ``samples`` must fit in (a rule
    reading more samples than a pass holds could never fire nor resolve)."""
    found = Alerts()
    if not isinstance(raw, dict):
        bad("alerts", "must be a table")
        return found
    known = {"webhook", "webhook_env", "cooldown", "timeout", "backoff", "max_backoff", "rules"}
    known.add("quorum")
    unknown_keys(raw, "alerts", known, bad)
    webhook, env = raw.get("webhook"), raw.get("webhook_env")
    if webhook is not None and not (isinstance(webhook, str) and _URL.match(webhook)):
        bad("alerts.webhook", 'must be an http(s) URL (e.g. "http://127.0.0.1:9000/hook")')
        webhook = None
    if env is not None and not is_env_name(env):
        bad("alerts.webhook_env", 'must name an environment variable (e.g. "RTAX_WEBHOOK")')
        env = None
    if webhook is not None and env is not None:
        bad("alerts.webhook", "give webhook or webhook_env, not both")
    found = replace(found, webhook=webhook, webhook_env=env)
    if "quorum" in raw:
        if is_whole(raw["quorum"], low=1):
            found = replace(found, quorum=raw["quorum"])
        else:
            bad("alerts.quorum", "must be a whole number >= 1 (vantages that must see it)")
    for key, attr in (
        ("cooldown", "cooldown_s"),
        ("timeout", "timeout_s"),
        ("backoff", "backoff_s"),
        ("max_backoff", "max_backoff_s"),
    ):
        if key in raw:
            try:
                seconds = positive_duration(raw[key], zero=key == "cooldown")
                found = replace(found, **{attr: seconds})
            except ValueError as exc:
                bad(f"alerts.{key}", str(exc))
    if "rules" not in raw:
        return found
    entries = raw["rules"]
    if not isinstance(entries, list):
        bad("alerts.rules", "must be an array of tables ([[alerts.rules]])")
        return found
    rules: list[Rule] = []
    for i, entry in enumerate(entries):
        rule = _rule(i, entry, bad, substrates, window)
        if rule is not None:
            if any(r.name == rule.name for r in rules):
                bad(f"alerts.rules.{rule.name}", "defined twice")
            rules.append(rule)
    return replace(found, rules=tuple(rules))


def _rule(i: int, entry: Any, bad: Bad, substrates: set[str], window: int) -> Rule | None:
    key = f"alerts.rules[{i}]"
    if not isinstance(entry, dict):
        bad(key, "must be a table")
        return None
    name = entry.get("name")
    if not is_text(name):
        bad(f"{key}.name", "missing (a non-empty string)")
        return None
    key = f"alerts.rules.{name}"
    unknown_keys(entry, key, _RULE_KEYS, bad)
    given = [c for c in CONDITIONS if c in entry]
    if len(given) != 1:
        bad(key, f"needs exactly one condition of: {', '.join(CONDITIONS)}")
        return None
    condition = given[0]
    metric = entry.get("metric")
    implied = {"success_below": "success_rate", "stale_after": "staleness"}.get(condition)
    allowed = {
        "p95_above": LATENCY_METRICS,
        "change_above": (*LATENCY_METRICS, "success_rate"),
    }.get(condition, (implied,))
    if metric is None and implied:
        metric = implied
    if metric not in allowed:
        bad(f"{key}.metric", f"{condition} watches one of: {', '.join(str(m) for m in allowed)}")
        return None
    try:
        limit = _limit(condition, entry[condition])
    except ValueError as exc:
        bad(f"{key}.{condition}", str(exc))
        return None
    samples = entry.get("samples", 20)
    if not is_whole(samples, low=1):
        bad(f"{key}.samples", "must be a whole number >= 1")
        samples = 20
    elif samples > window and condition in ("p95_above", "success_below"):
        bad(
            f"{key}.samples",
            f"{samples} is more than detection.window ({window}): a pass reads only the newest "
            f"{window} rollouts, so the rule could never fire nor resolve",
        )
    subs = names(entry.get("substrates", []))
    if subs is None:
        bad(f"{key}.substrates", "must be a list of substrate names")
        subs = []
    for s in subs:
        if s not in substrates:
            bad(f"{key}.substrates", f"unknown substrate {s!r} (define it in [[substrates]])")
    return Rule(name, str(metric), condition, limit, samples, tuple(subs))


def _limit(condition: str, value: Any) -> float:
    """A rule's limit: seconds, a fraction or a ratio, by its condition; else ValueError."""
    if condition in ("p95_above", "stale_after"):
        return positive_duration(value)
    if condition == "success_below":
        if not is_positive(value) or value > 1:
            raise ValueError("must be a fraction in (0, 1]")
        return float(value)
    if not is_positive(value) or value <= 1:
        raise ValueError("must be a ratio > 1 (1.5: 50% worse)")
    return float(value)


def parse_status(raw: Any, bad: Bad, substrates: set[str]) -> StatusRules:
    """The ``[status]`` table (the status board's rules, `rtax.analysis.status`); each mistake
    through `bad`. ``p95_above`` is one duration for every substrate, or a table of substrate
    names (``"*"``: the others) to durations."""
    found = StatusRules()
    if not isinstance(raw, dict):
        bad("status", "must be a table")
        return found
    known = {"samples", "p95_above", "degraded_below", "down_below", "down_after"}
    known |= {"stale_intervals", "stale_after"}
    unknown_keys(raw, "status", known, bad)
    values: dict[str, Any] = {}
    for key in ("samples", "down_after"):
        if key in raw:
            value = raw[key]
            if not is_whole(value, low=1):
                bad(f"status.{key}", "must be a whole number >= 1")
            else:
                values[key] = value
    for key in ("degraded_below", "down_below"):
        if key in raw:
            if is_positive(raw[key]) and raw[key] <= 1:
                values[key] = float(raw[key])
            else:
                bad(f"status.{key}", "must be a fraction in (0, 1]")
    if "stale_intervals" in raw:
        if is_positive(raw["stale_intervals"]):
            values["stale_intervals"] = float(raw["stale_intervals"])
        else:
            bad("status.stale_intervals", "must be a number > 0 (3: three plan intervals)")
    if "stale_after" in raw:
        try:
            values["stale_after_s"] = positive_duration(raw["stale_after"])
        except ValueError as exc:
            bad("status.stale_after", str(exc))
    if "p95_above" in raw:
        given = raw["p95_above"]
        table = given if isinstance(given, dict) else {"*": given}
        limits: dict[str, float] = {}
        for name, value in table.items():
            where = "status.p95_above" + (f".{name}" if isinstance(given, dict) else "")
            if name != "*" and name not in substrates:
                bad(where, f"unknown substrate {name!r} (define it in [[substrates]])")
                continue
            try:
                limits[name] = positive_duration(value)
            except ValueError as exc:
                bad(where, str(exc))
        values["p95_above_s"] = limits
    rules = replace(found, **values)
    if rules.down_below > rules.degraded_below:
        bad("status.down_below", f"must be at most degraded_below ({rules.degraded_below})")
    if rules.down_after > rules.samples:
        bad("status.down_after", f"must be at most samples ({rules.samples})")
    return rules
