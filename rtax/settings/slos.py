"""The ``[[slos]]`` tables: objectives with error budgets and burn-rate alerts
(docs/alerts.md#objectives-slos).

Why here and the type in `rtax.analysis.slo` (`Objective`, `Burn`): the pure model reads those
types and must not import the settings, while reading the tables is the configuration's job,
one line per mistake naming its key. An entry names its series with the one selector of
`rtax.settings.selector` and exactly one SLI: ``time_to_first_command`` or ``episode`` (the
threshold, a duration) or ``success = true``.
"""

from __future__ import annotations

from typing import Any

from rtax.analysis.slo import DEFAULT_BURN, DEFAULT_PERIOD_S, Burn, Objective, burn_rules
from rtax.core.checks import Bad, is_number, is_positive, is_text, positive_duration, unknown_keys
from rtax.settings import selector

#: The SLI keys: one of them per entry.
INDICATORS: tuple[str, ...] = ("time_to_first_command", "episode", "success")
_KEYS = frozenset({"name", "series", "target", "period", "burn", *INDICATORS})
_BURN_KEYS = ("long", "short", "factor")


def parse(
    raw: Any,
    bad: Bad,
    substrates: set[str],
    raw_days: float | None = None,
    taken: frozenset[str] = frozenset(),
) -> tuple[Objective, ...]:
    """The ``[[slos]]`` array; each mistake through `bad`. `raw_days`: how long raw runs are
    kept ([retention]); a period longer than that could not be counted, so it is a mistake.
    `taken`: the ``[[alerts.rules]]`` names, which a burn rule's name must not repeat (an
    incident names its rule)."""
    if not isinstance(raw, list):
        bad("slos", "must be an array of tables ([[slos]])")
        return ()
    found: list[Objective] = []
    for i, entry in enumerate(raw):
        objective = _objective(i, entry, bad, substrates, raw_days)
        if objective is None:
            continue
        if any(o.name == objective.name for o in found):
            bad(f"slos.{objective.name}", "defined twice")
        for rule in burn_rules(objective):
            if rule.name in taken:
                bad(f"slos.{objective.name}", f"its rule {rule.name!r} is an [[alerts.rules]] name")
        found.append(objective)
    return tuple(found)


def _objective(
    i: int, entry: Any, bad: Bad, substrates: set[str], raw_days: float | None
) -> Objective | None:
    key = f"slos[{i}]"
    if not isinstance(entry, dict):
        bad(key, "must be a table")
        return None
    name = entry.get("name")
    if not is_text(name):
        bad(f"{key}.name", "missing (a non-empty string)")
        return None
    key = f"slos.{name}"
    unknown_keys(entry, key, _KEYS, bad)
    chosen = selector.parse(entry.get("series"), f"{key}.series", bad, substrates)
    given = [k for k in INDICATORS if k in entry]
    metric, threshold = None, None
    if len(given) != 1:
        bad(key, f"needs exactly one indicator of: {', '.join(INDICATORS)}")
    else:
        metric, threshold = _indicator(key, given[0], entry[given[0]], bad)
    target = entry.get("target")
    if not (is_number(target) and 0 < target < 1):
        bad(f"{key}.target", "must be a fraction between 0 and 1 (0.99: 99 % good)")
        target = None
    period = _duration(entry, "period", key, bad, DEFAULT_PERIOD_S)
    if raw_days is not None and period > raw_days * 86_400:
        bad(
            f"{key}.period",
            f"longer than the raw runs kept ([retention] raw_days = {raw_days:g}): "
            "a budget is counted from raw runs",
        )
    burn = _burn(entry.get("burn"), key, bad, period)
    if metric is None or target is None or burn is None:
        return None
    return Objective(name, chosen, metric, float(target), threshold, period, burn)


def _indicator(key: str, which: str, value: Any, bad: Bad) -> tuple[str | None, float | None]:
    """(metric, threshold) of the one SLI key; (None, None) after a mistake."""
    if which == "success":
        if value is not True:
            bad(f"{key}.success", "must be true (the success objective)")
            return None, None
        return "success_rate", None
    try:
        return which, positive_duration(value)
    except ValueError as exc:
        bad(f"{key}.{which}", f"the threshold: {exc}")
        return None, None


def _duration(table: dict[str, Any], name: str, key: str, bad: Bad, default: float) -> float:
    if name not in table:
        return default
    try:
        return positive_duration(table[name])
    except ValueError as exc:
        bad(f"{key}.{name}", str(exc))
        return default


def _burn(raw: Any, key: str, bad: Bad, period: float) -> tuple[Burn, ...] | None:
    """The alert pairs (absent: the SRE workbook's two; ``[]``: none, a budget only)."""
    if raw is None:
        return DEFAULT_BURN
    if not isinstance(raw, list):
        bad(f"{key}.burn", 'must be a list of tables, e.g. [{ long = "1h", short = "5m", '
            "factor = 14.4 }]")  # fmt: skip
        return None
    pairs: list[Burn] = []
    for i, pair in enumerate(raw):
        where = f"{key}.burn[{i}]"
        if not isinstance(pair, dict):
            bad(where, "must be a table { long, short, factor }")
            continue
        unknown_keys(pair, where, _BURN_KEYS, bad, say_known=_BURN_KEYS)
        missing = [k for k in _BURN_KEYS if k not in pair]
        if missing:
            bad(where, f"needs {', '.join(missing)}")
            continue
        long = _duration(pair, "long", where, bad, 0.0)
        short = _duration(pair, "short", where, bad, 0.0)
        factor = pair["factor"]
        if not (long and short):  # said above
            continue
        if not is_positive(factor):
            bad(f"{where}.factor", "must be a number > 0 (14.4: the budget 14.4x as fast)")
            continue
        if not (0 < short < long):
            bad(f"{where}.short", "must be shorter than long")
            continue
        if long > period:
            bad(f"{where}.long", "must be at most the period")
            continue
        pairs.append(Burn(long, short, float(factor)))
    return tuple(pairs) if len(pairs) == len(raw) else None
