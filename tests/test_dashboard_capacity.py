"""The Capacity page under Streamlit's AppTest, on load runs with known figures: the envelope it
shows is `rtax.analysis.envelope`'s on the stored rows and the hand-worked one, the launch-order
profile draws each launch, and a saturated client is called out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from factories import make_record, store_load
from polling import DEADLINE_S
from rtax.analysis import envelope
from rtax.settings.loads import Bounds
from rtax.store.database import Store

APP = str(Path(__file__).resolve().parent.parent / "app.py")
NOW = datetime.now(UTC)


def _load(store: Store, load_id: str, shape: str, concurrency: int, ttfcs, failures=(), **fig):
    started = (NOW - timedelta(minutes=10 - concurrency / 10)).isoformat()
    store_load(store, load_id, shape, concurrency, ttfcs, failures, started_at=started, **fig)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> Path:
    """tests/test_envelope.py's docker series, stored: holds at 10, breaks at 20."""
    path = tmp_path_factory.mktemp("capacity") / "loads.db"
    with Store(path) as store:
        _load(store, "a", "sequential", 1, [1.0, 1.2, 1.4, 1.6, 1.8], creates_per_s=2.0)
        _load(store, "b", "staggered", 10, [1.5, 2.0, 2.5, 3.0, 3.5], ["harness_error"],
              creates_per_s=12.0, harness_cpu_cores=0.95)  # fmt: skip
        _load(store, "c", "burst", 20, [2.0, 3.0, 4.0, 5.0], ["rate_limited"], creates_per_s=9.0)
    return path


def _page(db: Path, monkeypatch) -> AppTest:
    monkeypatch.setenv("RTAX_DB", str(db))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    at.run()
    at.switch_page("pages/capacity.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == ["Capacity"]
    return at


def test_the_envelope_shown_is_the_fit_of_the_stored_rows(loaded: Path, monkeypatch) -> None:
    at = _page(loaded, monkeypatch)
    (metric,) = at.metric
    assert metric.label == "docker T0: concurrency held"
    assert (metric.value, metric.delta) == ("10", "breaks at 20")  # worked out by hand
    shown = at.dataframe[0].value.iloc[0]
    with Store(loaded, read_only=True) as store:
        loads = store.loads.read()
        fitted = envelope.fit(
            envelope.points(loads, store.loads.rollouts(list(loads["load_id"]))), Bounds()
        ).iloc[0]
    for column in ("p95_limit_s", "held_concurrency", "break_concurrency", "held_creates_per_s"):
        assert shown[column] == pytest.approx(fitted[column])
    assert shown["p95_limit_s"] == pytest.approx(3.52)
    assert shown["broken_by"] == "TTFC p95 4.85 s > 3.52 s; failures 20% > 5%"
    points = at.dataframe[1].value.set_index("concurrency")
    assert points.loc[20, "n"] == 4 and points.loc[20, "ttfc_p95_s"] == pytest.approx(4.85)
    assert points.loc[10, "failure_rate"] == 0  # the harness error is rtax's, not docker's


def test_a_saturated_client_is_called_out(loaded: Path, monkeypatch) -> None:
    at = _page(loaded, monkeypatch)
    assert any("harness CPU 0.95 of a core" in w.value for w in at.warning)
    runs = at.dataframe[2].value.set_index("load_id")
    assert runs.loc["b", "client"] == "harness CPU 0.95 of a core"
    assert runs.loc["a", "client"] == "ok"


def test_the_launch_profile_is_of_a_staggered_run_first(loaded: Path, monkeypatch) -> None:
    at = _page(loaded, monkeypatch)
    picker = at.selectbox(key="capacity_run")
    assert picker.value == "b" and "staggered of 6" in picker.format_func(picker.value)
    picker.set_value("c").run()
    assert not at.exception
    assert at.selectbox(key="capacity_run").value == "c"


def test_no_load_runs_says_how_to_make_some(tmp_path: Path, monkeypatch) -> None:
    with Store(tmp_path / "empty.db") as store:
        store.save_rollout(make_record("r"))
    at = _page(tmp_path / "empty.db", monkeypatch)
    assert any("rtax burst" in i.value for i in at.info)


def test_the_profile_figure_draws_each_launch() -> None:
    from rtax.dashboard import capacity

    rollouts = pd.DataFrame(
        {"load_index": [0, 1, 2], "status": ["ok", "failed", "ok"],
         "error_class": [None, "create_failed", None],
         "time_to_first_command_s": [0.5, None, 0.7]}
    )  # fmt: skip
    fig = capacity.launch_profile(rollouts, "t")
    ok, failed = fig.data
    assert list(ok.x) == [0, 2] and list(ok.y) == [0.5, 0.7] and "n=2" in ok.name
    assert list(failed.x) == [1] and list(failed.text) == ["create_failed"]


def test_rates_per_second_are_not_shown_as_seconds() -> None:
    """`creates_per_s` ends in ``_s`` but is a rate: "/s", never "s"; failure rates are %."""
    from rtax.dashboard import format

    cells = {
        name: format.formatter(name)(value)
        for name, value in {
            "creates_per_s": 12.5,
            "ttfc_p95_s": 0.25,
            "failure_rate": 0.05,
            "failure_rate_max": 0.1,
        }.items()
    }
    assert cells["creates_per_s"].endswith("/s") and "12.5" in cells["creates_per_s"]
    assert cells["ttfc_p95_s"] == "250 ms"
    assert cells["failure_rate"] == "5.0%" and cells["failure_rate_max"] == "10.0%"
