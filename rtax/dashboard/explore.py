"""Inputs a person explores with: a slider (log-spaced where a quantity spans decades) with its
exact value in a number box beside it, and the line that says what moved since the previous
setting (docs/dashboard.md#projection-inputs).

Why a select_slider and a number box kept in sync: Streamlit has no log slider, and a slider's
thumb can only land on its options, while a plan needs any exact count; the box holds the exact
value (and is the one bound to the URL), the slider moves it in steps of 1-2-3-5 per decade.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import streamlit as st

from rtax.dashboard import format, urlstate

Number = int | float


def log_values(
    low: Number, high: Number, mantissas: Sequence[Number] = (1, 2, 3, 5), zero: bool = False
) -> list[Number]:
    """1-2-3-5 per decade from `low` to `high` (both kept), with 0 first when `zero`: whole
    numbers from a `low` of 1 or more, else floats (a number box takes one type)."""
    whole = low >= 1
    values: list[Number] = [0 if whole else 0.0] if zero else []
    exponent = math.floor(math.log10(low))
    while True:
        for m in mantissas:
            v = m * 10.0**exponent
            v = round(v) if whole else round(v, 10)
            if low <= v <= high:
                values.append(v)
        if 10.0**exponent > high:
            break
        exponent += 1
    if values[-1] != high:
        values.append(high)
    return values


def nearest(options: Sequence[Number], value: Number) -> Number:
    """The option nearest `value` on a log scale (0 only for a value of 0 or less)."""
    positive = [o for o in options if o > 0]
    if value <= 0 or not positive:
        return min(options, key=lambda o: abs(o - value))
    return min(positive, key=lambda o: abs(math.log(o) - math.log(value)))


def _slider_key(key: str) -> str:
    return f"{key}__slider"


def _from_slider(key: str) -> None:
    st.session_state[key] = st.session_state[_slider_key(key)]


def _from_box(key: str, options: Sequence[Number]) -> None:
    value = st.session_state[key]
    if value is not None:
        st.session_state[_slider_key(key)] = nearest(options, value)


def slider(
    label: str,
    key: str,
    options: Sequence[Number],
    default: Number,
    *,
    min_value: Number,
    max_value: Number,
    step: Number = 1,
    show: Callable[[Any], str] = format.short,
    help: str | None = None,
    where: Any = st,
) -> Number:
    """A select_slider over `options` and, beside it, a number box with the exact value
    (`min_value`..`max_value`, bound to the URL under `key`), kept in sync: the slider snaps
    the box to its option, the box moves the slider to the option nearest its value."""
    left, right = where.columns([4, 1], vertical_alignment="bottom")
    exact = right.number_input(
        f"{label} (exact)",
        min_value=min_value,
        max_value=max_value,
        value=default,
        step=step,
        on_change=_from_box,
        args=(key, options),
        label_visibility="collapsed",
        **urlstate.bound(key),
    )
    left.select_slider(
        label,
        options=list(options),
        value=nearest(options, exact),
        format_func=show,
        key=_slider_key(key),
        on_change=_from_slider,
        args=(key,),
        help=help,
    )
    return exact


def what_changed(
    before: Mapping[str, str],
    after: Mapping[str, str],
    figures_before: Mapping[str, float],
    figures_after: Mapping[str, float],
    show: Callable[[Any], str] = format.hours,
) -> str | None:
    """The line "worker-hours 1,234 h → 2,468 h (+100%) since trajectories 10 k → 20 k": each
    figure that moved, then the inputs that differ (given as their display strings). None when
    no input changed."""
    moved = [f"{k} {before[k]} → {v}" for k, v in after.items() if k in before and before[k] != v]
    if not moved:
        return None
    parts = []
    for name, new in figures_after.items():
        old = figures_before.get(name)
        if old is None or format.missing(old) or format.missing(new) or old == new:
            continue
        change = f" ({(new - old) / old:+.0%})" if old else ""
        parts.append(f"{name} {show(old)} → {show(new)}{change}")
    figures = "; ".join(parts) if parts else "no figure moved"
    return f"{figures} since {', '.join(moved)}"


def changed_line(
    name: str, inputs: Mapping[str, str], figures: Mapping[str, float], **kwargs: Any
) -> str | None:
    """The what-changed line of section `name` in this session: against the setting before the
    newest change of `inputs` (a rerun that changes no input keeps the line)."""
    state = st.session_state.setdefault(f"_changed_{name}", {})
    last = state.get("inputs")
    if last is not None and dict(last) != dict(inputs):
        state["line"] = what_changed(last, inputs, state["figures"], figures, **kwargs)
    state["inputs"], state["figures"] = dict(inputs), dict(figures)
    return state.get("line")
