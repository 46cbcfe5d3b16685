"""The ``limits`` and ``prices`` tables of a ``[[substrates]]`` entry
(docs/configuration.md#limits-and-prices).

Why here and the numbers' types in `rtax.planning.pricing`: the fleet models compute with
`Limits` and `Prices` (and must not import the settings), while reading them from the file is
the configuration's job, one line per mistake. Every price names its `source` and the `date` it
was read, or it is refused; a value may be ``"unset"``: the shape is written down, the number
is not known yet.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from rtax.core.checks import Bad, is_number, is_whole, unknown_keys
from rtax.planning.pricing import PRICE_KEYS, UNSET, Billing, Limits, Price, Prices

_LIMIT_KEYS = ("max_concurrent", "creates_per_s")
_SIZE_KEYS = ("vcpus", "memory_gib")


def _amount(value: Any, key: str, bad: Bad, *, whole: bool = False, zero: bool = False) -> Any:
    """A positive number (>= 0 with `zero`; a whole number with `whole`), None for "unset"."""
    if value == UNSET:
        return None
    kind = "a whole number" if whole else "a number"
    ok = is_whole(value) if whole else is_number(value)
    if ok and (value >= 0 if zero else value > 0):
        return value
    bad(key, f'must be {kind} {">= 0" if zero else "> 0"}, or "{UNSET}"')
    return None


def _table(value: Any, key: str, bad: Bad, known: tuple[str, ...]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        bad(key, "must be a table")
        return {}
    unknown_keys(value, key, known, bad, say_known=known)
    return value


def parse_limits(value: Any, key: str, bad: Bad) -> Limits:
    """The ``limits`` table of a substrate entry (`key` names it in messages)."""
    table = _table(value, key, bad, _LIMIT_KEYS)
    concurrent = table.get("max_concurrent", UNSET)
    rate = table.get("creates_per_s", UNSET)
    return Limits(
        _amount(concurrent, f"{key}.max_concurrent", bad, whole=True),
        _amount(rate, f"{key}.creates_per_s", bad),
    )


def _date(value: Any, key: str, bad: Bad, today: date) -> date | None:
    if isinstance(value, datetime):
        value = value.date()
    elif isinstance(value, str):
        try:
            value = date.fromisoformat(value)
        except ValueError:
            value = None
    if not isinstance(value, date):
        bad(key, "must be the date the price was read (2026-05-01)")
        return None
    if value > today:
        bad(key, f"{value} is in the future: the date the price was read")
        return None
    return value


def _price(value: Any, key: str, bad: Bad, today: date) -> Price | None:
    if value == UNSET:
        return None
    if not isinstance(value, dict):
        bad(key, f'must be {{ usd = ..., source = "...", date = ... }} or "{UNSET}"')
        return None
    _table(value, key, bad, ("usd", "source", "date"))
    missing = [k for k in ("usd", "source", "date") if k not in value]
    if missing:
        bad(key, f"missing {', '.join(missing)}: every price names its source and its date")
        return None
    usd = _amount(value["usd"], f"{key}.usd", bad, zero=True) if value["usd"] != UNSET else None
    source = value["source"]
    if not isinstance(source, str) or not source.strip() or source == UNSET:
        bad(f"{key}.source", "must say where the price was read (a URL)")
        source = None
    when = _date(value["date"], f"{key}.date", bad, today)
    if usd is None or source is None or when is None:
        return None
    return Price(float(usd), source, when)


def _billing(value: Any, key: str, bad: Bad, today: date) -> Billing | None:
    """``billing = { minimum_s, granularity_s, source, date }``: how the provider rounds an
    environment's billed time, dated and sourced like a price; absent or "unset": None."""
    if value is None or value == UNSET:
        return None
    if not isinstance(value, dict):
        bad(
            key,
            "must be { minimum_s = ..., granularity_s = ..., source = ..., date = ... } "
            f'or "{UNSET}"',
        )
        return None
    _table(value, key, bad, ("minimum_s", "granularity_s", "source", "date"))
    missing = [k for k in ("source", "date") if k not in value]
    if missing:
        bad(key, f"missing {', '.join(missing)}: billing rules name their source and date")
        return None
    minimum = _amount(value.get("minimum_s", 0), f"{key}.minimum_s", bad, zero=True)
    step = _amount(value.get("granularity_s", 1), f"{key}.granularity_s", bad)
    source = value["source"]
    if not isinstance(source, str) or not source.strip() or source == UNSET:
        bad(f"{key}.source", "must say where the billing rule was read (a URL)")
        return None
    when = _date(value["date"], f"{key}.date", bad, today)
    if minimum is None or step is None or when is None:
        return None
    return Billing(float(minimum), float(step), source, when)


def parse_prices(value: Any, key: str, bad: Bad, today: date | None = None) -> Prices:
    """The ``prices`` table of a substrate entry: the environment's `vcpus` and `memory_gib`,
    each price as ``{ usd, source, date }`` or "unset", and its `billing` rule."""
    today = today or datetime.now(UTC).date()
    table = _table(value, key, bad, (*_SIZE_KEYS, *PRICE_KEYS, "billing"))
    sizes = {k: _amount(table.get(k, UNSET), f"{key}.{k}", bad) for k in _SIZE_KEYS}
    prices = {k: _price(table.get(k, UNSET), f"{key}.{k}", bad, today) for k in PRICE_KEYS}
    for price, size in (("per_vcpu_hour", "vcpus"), ("per_gib_hour", "memory_gib")):
        if prices[price] is not None and sizes[size] is None:
            bad(f"{key}.{size}", f"{price} is set: it needs the environment's {size}")
    billing = _billing(table.get("billing"), f"{key}.billing", bad, today)
    return Prices(**sizes, **prices, billing=billing)
