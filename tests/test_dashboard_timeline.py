"""The Timeline under Streamlit's AppTest: opened minutes after a first start (one five-minute
bucket, sixteen series), it shows the few series that need attention, worst first, on an axis
that spans the window; over a history with a change accepted as the new baseline, an
acknowledged incident and maintenance windows from the configuration and the store, it draws
each of them (docs/dashboard.md#timeline)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from factories import make_record
from polling import DEADLINE_S
from rtax.core.series import Selector, Series
from rtax.store.database import Store

APP = str(Path(__file__).resolve().parent.parent / "app.py")
SUBSTRATES = ("local", "docker", "docker-gvisor", "podman")
WORKLOADS = (("T0", 0), ("T1", 0), ("T2", 0), ("T2", 10))


def _key(substrate: str, tier: str = "T0", steps: int = 0) -> str:
    return Series(substrate, fidelity="real", tier=tier, steps=steps).key


def _incident(series: Series, start: str, **fields: Any) -> dict[str, Any]:
    """An incident row as the detection pass writes one (`Incidents.add`)."""
    return {
        "series": series.key, "substrate": series.substrate, "tier": series.tier,
        "steps": series.steps, "mode": series.mode, "fidelity": series.fidelity,
        "metric": "time_to_first_command", "rule": "ttfc-change", "detector": "binseg",
        "start": start, "opened_at": start, "alert_open": "off", **fields,
    }  # fmt: skip


@pytest.fixture
def new_install(tmp_path: Path) -> Path:
    """Sixteen series (four substrates x four workloads), three rollouts each, all in the
    five-minute bucket of a second ago: a database minutes after `make run`. Three need
    attention: local T2 S=10's last three failed (down), docker T1 has an open incident
    (degraded), podman T0 only ever failed for rtax's own reasons (unknown)."""
    now = datetime.now(UTC)
    # every rollout within the second after a bucket's start that is at least a second past
    base = pd.Timestamp(now - timedelta(seconds=1)).floor("5min").to_pydatetime()
    path = tmp_path / "rtax.db"
    with Store(path) as store:
        i = 0
        for substrate in SUBSTRATES:
            for tier, steps in WORKLOADS:
                for _ in range(3):
                    i += 1
                    failed = (substrate, tier, steps) == ("local", "T2", 10)
                    own = (substrate, tier) == ("podman", "T0")
                    cls = "harness_error" if own else "exec_error" if failed else None
                    store.save_rollout(
                        make_record(
                            f"r{i}", substrate=substrate, kind=substrate.split("-")[0],
                            tier=tier, steps=steps,
                            started_at=(base + timedelta(milliseconds=10 * i)).isoformat(),
                            status="failed" if cls else "ok", error_class=cls,
                        )
                    )  # fmt: skip
        docker_t1 = Series("docker", fidelity="real", tier="T1")
        store.incidents.add(_incident(docker_t1, base.isoformat(), detail="p50 up"))
    return path


def _app(db: Path, monkeypatch: pytest.MonkeyPatch, config: Path | None, **query: str) -> AppTest:
    """The Timeline opened (on a link with `query`) as a browser would, through the router."""
    monkeypatch.setenv("RTAX_DB", str(db))
    monkeypatch.setenv("RTAX_CONFIG", str(config or db.parent / "none.toml"))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    for name, value in query.items():
        at.query_params[name] = value
    at.switch_page("pages/timeline.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _figure(at: AppTest) -> dict[str, Any]:
    """The Timeline's Plotly figure as the page sends it to the browser."""
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def _moment(text: str) -> pd.Timestamp:
    """A date of the figure (UTC wall time, as Plotly reads it)."""
    return pd.Timestamp(text).tz_localize("UTC")


def _axis(figure: dict[str, Any]) -> tuple[pd.Timestamp, pd.Timestamp]:
    start, end = figure["layout"]["xaxis"]["range"]
    return _moment(start), _moment(end)


def test_a_new_install_shows_the_few_series_that_need_attention_worst_first(
    new_install: Path, monkeypatch
) -> None:
    at = _app(new_install, monkeypatch, None)
    series = at.multiselect(key="t_series")
    assert series.value == [_key("local", "T2", 10), _key("docker", "T1"), _key("podman")]
    assert len(series.options) == 16  # the rest one click away
    assert any(
        c.value == "By default the 3 series that need attention, worst first: local · T2 S=10 "
        "(down); docker · T1 (degraded, 1 open incident); podman · T0 (unknown); 13 more under "
        "Series."
        for c in at.caption
    )
    figure = _figure(at)
    legend = [t["name"] for t in figure["data"] if t.get("showlegend", True)]
    assert sorted(legend) == ["docker · T1", "local · T2 S=10", "podman · T0"]  # one each


def test_the_axis_spans_the_window_not_a_millisecond(new_install: Path, monkeypatch) -> None:
    """One bucket, all time: the data's span, at least an hour of five-minute buckets ending
    now, the bucket inside it; a sidebar window of 24 hours: 24 hours."""
    before = pd.Timestamp(datetime.now(UTC))
    at = _app(new_install, monkeypatch, None)
    start, end = _axis(_figure(at))
    assert before <= end <= pd.Timestamp(datetime.now(UTC))
    assert end - start == pd.Timedelta(hours=1)
    (bucket,) = {_moment(x) for t in _figure(at)["data"] for x in t["x"]}
    assert start < bucket <= end
    day = _app(new_install, monkeypatch, None, f_window="last 24 hours")
    start, end = _axis(_figure(day))
    assert end - start == pd.Timedelta(days=1)


def test_a_link_still_chooses_the_series(new_install: Path, monkeypatch) -> None:
    """`t_series` in the URL (the option's label, docs/dashboard.md#links) wins over the
    default, and the chart draws that series alone; one more is a click."""
    at = _app(new_install, monkeypatch, None, t_series="docker · T0")
    assert at.multiselect(key="t_series").value == [_key("docker")]
    assert {t["name"] for t in _figure(at)["data"] if t.get("showlegend", True)} == {"docker · T0"}
    at.multiselect(key="t_series").select(_key("local")).run()  # the rest one click away
    assert at.multiselect(key="t_series").value == [_key("docker"), _key("local")]
    assert len([t for t in _figure(at)["data"] if t.get("showlegend", True)]) == 2


CONFIG = """
[[substrates]]
name = "docker"
kind = "docker"
[[substrates]]
name = "local"
kind = "local"
[[maintenance]]
reason = "kernel upgrade"
start = "{start}"
end = "{end}"
"""


def write_history(folder: Path) -> Path:
    """folder/rtax.db and folder/rtax.toml (the browser test's too). docker T0: 40 rollouts
    five minutes apart up to a minute ago, 0.3 s for the first 20, then 0.6 s for good;
    incident #1 from the first slow one (95 minutes ago) was accepted as the new baseline
    after ten samples (45 minutes ago); #2, a success drop 20 minutes ago, is open and
    acknowledged. local T0: the same times at 50 ms, #3 on it resolved as recovered. The
    store's window "registry migration" covers docker from 150 to 120 minutes ago; the
    configuration's "kernel upgrade" every series from 30 to 20 minutes ago."""
    now = datetime.now(UTC)

    def ago(minutes: float) -> str:
        return (now - timedelta(minutes=minutes)).isoformat(timespec="microseconds")

    (folder / "rtax.toml").write_text(CONFIG.format(start=ago(30), end=ago(20)))
    docker = Series("docker", fidelity="real")
    local = Series("local", fidelity="real")
    with Store(folder / "rtax.db") as store:
        for i in range(40):
            minutes = 1 + 5 * (39 - i)
            for series, ttfc in ((docker, 0.3 if i < 20 else 0.6), (local, 0.05)):
                store.save_rollout(
                    make_record(f"{series.substrate}{i}", substrate=series.substrate,
                                kind=series.substrate, started_at=ago(minutes),
                                time_to_first_command_s=ttfc)
                )  # fmt: skip
        first = store.incidents.add(
            _incident(docker, ago(96), before_p50=0.3, after_p50=0.6, magnitude=2.0,
                      detail="time to first command p50 0.300 s -> 0.600 s")
        )  # fmt: skip
        store.incidents.resolve(
            first, ago(46), "baseline", at=ago(45),
            detail="time to first command p50 0.300 s -> 0.600 s; accepted as the new baseline "
            "after 10 samples at p50 0.600 s",
        )  # fmt: skip
        second = store.incidents.add(
            _incident(docker, ago(21), metric="success_rate", rule="failing",
                      detector="threshold", detail="success 100% -> 50%")
        )  # fmt: skip
        store.incidents.acknowledge(second, ago(15), "looking into the daemon")
        third = store.incidents.add(_incident(local, ago(60), detail="p50 50 ms -> 90 ms"))
        store.incidents.resolve(third, ago(50), "recovered", at=ago(49))
        store.maintenance.add(
            Selector(substrate=("docker",)), ago(150), ago(120), "registry migration", ago(151)
        )
    return folder


def test_the_timeline_draws_a_baseline_an_acknowledgement_and_maintenance(
    tmp_path: Path, monkeypatch
) -> None:
    """docker needs attention (its acknowledged incident is open): shown by default, with
    its accepted baseline marked where it was accepted, the acknowledged incident labelled
    so, and both windows over it; the incidents table carries the lifecycle."""
    folder = write_history(tmp_path)
    at = _app(folder / "rtax.db", monkeypatch, folder / "rtax.toml")
    assert at.multiselect(key="t_series").value == [_key("docker")]
    figure = _figure(at)
    texts = [a["text"] for a in figure["layout"]["annotations"]]
    assert sorted(texts) == [
        "#1 accepted as the new baseline",
        "incident #1 · resolved: baseline",
        "incident #2 · acknowledged",
        "maintenance: kernel upgrade",
        "maintenance: registry migration",
    ]
    accepted = next(a for a in figure["layout"]["annotations"] if "accepted" in a["text"])
    incident = next(a for a in figure["layout"]["annotations"] if a["text"].endswith("baseline"))
    assert _moment(accepted["x"]) - _moment(incident["x"]) == pd.Timedelta(minutes=50)
    table = next(d.value for d in at.dataframe if "resolution" in d.value.columns)
    rows = table.set_index("id")
    assert rows.loc[1, "state"] == "resolved: baseline" and rows.loc[1, "resolution"] == "baseline"
    assert rows.loc[2, "state"] == "acknowledged"
    assert rows.loc[2, "note"] == "acknowledged: looking into the daemon"
    assert 3 not in rows.index  # local's incident: local is not shown
    # local chosen too: its recovery is drawn grey, without a baseline's mark
    both = _app(folder / "rtax.db", monkeypatch, folder / "rtax.toml",
                t_series=["docker · T0", "local · T0"])  # fmt: skip
    texts = [a["text"] for a in _figure(both)["layout"]["annotations"]]
    assert "incident #3 · resolved: recovered" in texts
    assert sum("accepted as the new baseline" in t for t in texts) == 1
