"""Checks a stored load run against its stored rollouts, each figure computed another way: from
the run rows' wall-clock timestamps (``started_at``, ``scheduled_at``) and phases, never from
the runner's own clock or `rtax.analysis.loadrun`. Shared by the in-process, docker and emulated
tests."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any

import pandas as pd
import pytest

from rtax.store.database import Store


def _t(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def check_load(store: Store, load_id: str, *, complete: bool = True) -> dict[str, Any]:
    """Assert that the load run's row matches its rollouts; return the row."""
    row = store.loads.read(load_id=load_id).iloc[0].to_dict()
    runs = store.runs.read()
    runs = runs[runs["load_id"] == load_id].sort_values("load_index")
    assert row["status"] == ("complete" if complete else "interrupted")
    assert row["rollouts"] == len(runs)
    if complete:
        assert len(runs) == row["n"]
        assert runs["load_index"].tolist() == list(range(row["n"]))
    assert row["ok"] == int((runs["status"] == "ok").sum())
    ready = runs[runs["time_to_first_command_s"].notna()]
    assert row["ready"] == len(ready)
    failed = runs[runs["status"] != "ok"]
    assert json.loads(row["failures"]) == dict(Counter(failed["error_class"]))

    start = _t(row["started_at"])
    began = runs["started_at"].map(_t)
    if len(ready):
        ready_at = ready["started_at"].map(_t) + ready["time_to_first_command_s"]
        assert row["time_to_first_ready_s"] == pytest.approx(ready_at.min() - start, abs=0.005)
        if len(ready) == row["n"]:
            assert row["time_to_all_ready_s"] == pytest.approx(ready_at.max() - start, abs=0.005)
            assert row["time_to_all_ready_s"] >= row["time_to_first_ready_s"]
        else:
            assert pd.isna(row["time_to_all_ready_s"])

    # creates/s: accepted creates (an orchestration phase began) over the span from the first
    # create request to the last acceptance, from the rows' own timestamps
    sent = runs[runs["create_s"].notna()]
    accepted = sent[sent["orchestration_s"].notna()]
    if len(accepted):
        span = (accepted["started_at"].map(_t) + accepted["create_s"]).max()
        span -= sent["started_at"].map(_t).min()
        assert row["creates_per_s"] == pytest.approx(len(accepted) / span, rel=0.02)

    # the most rollouts in flight at once, from [started_at, started_at + wall_s]
    events = sorted(
        [(t, 1) for t in began] + [(t + w, -1) for t, w in zip(began, runs["wall_s"], strict=True)]
    )
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    assert row["concurrency"] == peak

    # dispatch lag: a rollout's start minus its launch's due time, both stored on its row
    # (over every launch that started: those of an interrupted run are not all stored)
    lags = began - runs["scheduled_at"].map(_t)
    if complete:
        assert row["dispatch_lag_max_s"] == pytest.approx(lags.max(), abs=0.002)
    assert (lags > -0.002).all()

    waits = [json.loads(p).get("rate_limit_waits") or [] for p in runs["provenance"]]
    assert row["rate_limit_waits"] == sum(len(w) for w in waits)
    assert row["harness_cpu_s"] >= 0 and row["harness_cpu_cores"] >= 0
    assert row["duration_s"] >= (row["time_to_all_ready_s"] or 0)
    return row
