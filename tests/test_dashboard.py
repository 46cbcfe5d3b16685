"""Every dashboard page under Streamlit's AppTest, on an empty and on a seeded database: no
exception, and the numbers shown are what `rtax.analysis.stats` / `rtax.planning.projection`
compute."""

from __future__ import annotations

import io
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from factories import make_record, store_load
from polling import DEADLINE_S
from rtax.analysis import stats
from rtax.dashboard import data, fleet, format, tables
from rtax.planning import projection, published
from rtax.store.database import Store

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PAGES = {
    "pages/overview.py": "Overview",
    "pages/timeline.py": "Timeline",
    "pages/cold_start.py": "Cold start",
    "pages/paths.py": "Paths",
    "pages/decomposition.py": "Decomposition",
    "pages/amortization.py": "Amortization",
    "pages/projection.py": "Projection",
    "pages/capacity.py": "Capacity",
    "pages/data.py": "Data",
}
NOW = datetime.now(UTC)
MIB = 1024 * 1024


def _record(i: int, substrate: str, tier: str, steps: int, episode: float, **kw):
    started = (NOW - timedelta(minutes=i)).isoformat(timespec="microseconds")
    return make_record(
        f"run{i:04d}",
        substrate=substrate,
        tier=tier,
        steps=steps,
        episode_s=episode,
        n_actions=steps or 1,
        started_at=started,
        **kw,
    )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    """Known samples: two real substrates on T0 (one failed run with a huge time that must not
    count), trajectories at S=10/50/150 on both, and an emulated series that must stay apart."""
    path = tmp_path_factory.mktemp("dash") / "seeded.db"
    with Store(path) as store:
        i = 0
        for ep in (0.02, 0.03, 0.025, 0.021):
            store.save_rollout(
                _record(i := i + 1, "local", "T0", 0, ep, time_to_first_command_s=ep / 2)
            )
        for ep in (0.30, 0.34, 0.31):
            store.save_rollout(
                _record(i := i + 1, "docker", "T0", 0, ep, time_to_first_command_s=ep - 0.05)
            )
        store.save_rollout(
            _record(
                i := i + 1, "docker", "T0", 0, 99.0, status="failed", error_class="action_timeout"
            )
        )
        for s in (10, 50, 150):
            for sub, fixed, per in (("local", 0.3, 0.11), ("docker", 1.0, 0.05)):
                for jitter in (0.0, 0.02):
                    store.save_rollout(_record(i := i + 1, sub, "T2", s, fixed + per * s + jitter))
        store.save_rollout(
            _record(i := i + 1, "kubernetes", "T0", 0, 1.5, fidelity="emulated", kind="kubernetes")
        )
    return path


def _app(db: Path, monkeypatch: pytest.MonkeyPatch, page: str | None = None) -> AppTest:
    monkeypatch.setenv("RTAX_DB", str(db))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    at.run()
    if page:
        at.switch_page(page)
        at.run()
    return at


def _ok(at: AppTest, title: str) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert [t.value for t in at.title] == [title]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_on_an_empty_database(tmp_path: Path, monkeypatch, page: str) -> None:
    at = _app(tmp_path / "absent.db", monkeypatch, page)
    _ok(at, PAGES[page])
    assert not (tmp_path / "absent.db").exists()  # reading never creates a database


@pytest.mark.parametrize("page", PAGES)
def test_every_page_on_a_seeded_database(seeded: Path, monkeypatch, page: str) -> None:
    _ok(_app(seeded, monkeypatch, page), PAGES[page])


def test_empty_overview_says_how_to_get_data(tmp_path: Path, monkeypatch) -> None:
    at = _app(tmp_path / "absent.db", monkeypatch)
    assert any("rtax probe" in i.value for i in at.info)


def _runs(db: Path) -> pd.DataFrame:
    with Store(db, create=False) as store:
        return stats.add_series(store.runs.read())


def test_overview_numbers_equal_stats(seeded: Path, monkeypatch) -> None:
    at = _app(seeded, monkeypatch)
    shown = at.dataframe[0].value
    runs = _runs(seeded)
    ttfc = stats.latency_table(runs, "time_to_first_command_s", by=tables.GROUP, quantiles=(50, 95))
    episode = stats.latency_table(runs, "episode_s", by=tables.GROUP, quantiles=(50, 95))
    assert list(shown["series"]) == list(ttfc["series"])
    assert shown["ttfc_p50_s"].tolist() == pytest.approx(ttfc["p50"].tolist(), nan_ok=True)
    assert shown["ttfc_n"].tolist() == ttfc["n"].tolist()
    assert shown["episode_p95_s"].tolist() == pytest.approx(episode["p95"].tolist())
    docker_t0 = shown[(shown["series"] == "docker") & (shown["tier"] == "T0")].iloc[0]
    assert docker_t0["success_rate"] == pytest.approx(3 / 4)  # the failure counts here...
    assert docker_t0["episode_p95_s"] < 1.0  # ...and never in the latencies
    assert "kubernetes [emulated]" in set(shown["series"])  # fidelity labelled, not merged
    assert any("**emulated** series" in c.value for c in at.caption)  # and explained


def test_cold_start_spread_and_table_equal_stats(seeded: Path, monkeypatch) -> None:
    at = _app(seeded, monkeypatch, "pages/cold_start.py")
    runs = _runs(seeded)
    t0 = runs[(runs["tier"] == "T0") & (runs["steps"] == 0)]
    expected = stats.latency_table(t0, "episode_s", by=("series",), quantiles=(50, 95, 99))
    shown = at.dataframe[0].value.set_index("series")
    for row in expected.itertuples(index=False):
        if row.p99 != row.p99:  # too few samples for a p99: said, never a number
            assert shown.loc[row.series, "p99"] == format.TOO_FEW
        else:
            assert shown.loc[row.series, "p99"] == format.column("p99", pd.Series([row.p99]))[0]
        assert shown.loc[row.series, "n"] == row.n
    real = expected[expected["series"].isin(["local", "docker"])].set_index("series")["p50"]
    ratio = real.max() / real.min()
    assert at.metric[0].value == format.ratio(ratio)  # real series only: never across fidelities
    assert "real" in at.metric[0].label and "emulated" in at.metric[1].label
    assert at.metric[1].value == "n/a"  # one emulated series has no spread


def test_the_paths_table_puts_each_launch_type_of_a_substrate_side_by_side(
    tmp_path: Path, monkeypatch
) -> None:
    """docs/measurement.md#launch-paths: one row per substrate and path, cold first, each
    figure the raw samples' percentile with its n; a path with no T2 shows none. What a path
    holds idle: the warm environments held 30 and 50 MiB as they waited (p50 40 MiB, n 2); the
    restore path's two ready snapshots 5 and 7 MiB on disk (12 MiB), a replaced one not."""
    path = tmp_path / "paths.db"
    samples = {"cold": (0.30, 0.32, 0.35), "warm": (0.08, 0.09), "restore": (0.55, 0.60, 0.62)}
    held = iter((30 * MIB, 50 * MIB))
    i = 0
    with Store(path) as store:
        for launch, values in samples.items():
            for v in values:
                pool = {"pool": {"memory_bytes": next(held)}} if launch == "warm" else {}
                store.save_rollout(
                    _record(
                        i := i + 1,
                        "docker",
                        "T0",
                        0,
                        v + 0.1,
                        time_to_first_command_s=v,
                        launch_type=launch,
                        provenance=json.dumps({"host": "test-host", **pool}),
                    )
                )
        for v in (4.0, 4.5):
            store.save_rollout(_record(i := i + 1, "docker", "T2", 0, v, launch_type="cold"))
        for n, (tier, size, state) in enumerate(
            (("T0", 9, "replaced"), ("T0", 5, "ready"), ("T2", 7, "ready"))
        ):
            store.snapshots.add(
                {
                    "snapshot_id": f"s{n}",
                    "substrate": "docker",
                    "fidelity": "real",
                    "tier": tier,
                    "made_at": NOW.isoformat(),
                    "size_bytes": size * MIB,
                    "state": state,
                }
            )
    at = _app(path, monkeypatch, "pages/paths.py")
    _ok(at, "Paths")
    shown = at.dataframe[0].value
    assert list(shown["launch_type"]) == ["cold", "warm", "restore"]
    shown = shown.set_index("launch_type")
    for launch, values in samples.items():
        assert shown.loc[launch, "ttfc_n"] == len(values)
        assert float(shown.loc[launch, "ttfc_p50_s"]) == pytest.approx(stats.percentile(values, 50))
    # (a column with a blank holds its display strings: docs/dashboard.md#formatting)
    assert shown.loc["cold", "episode_p50_s"] == "4.25 s"
    assert shown.loc["warm", "episode_n"] == ""  # no T2 on that path
    assert shown.loc["warm", "idle_memory_n"] == "2"
    assert shown.loc["warm", "idle_memory_p50_bytes"] == "40.0 MiB"
    assert shown.loc["restore", "snapshot_bytes"] == "12.0 MiB"
    assert shown.loc["cold", "snapshot_bytes"] == ""


def test_projection_numbers_equal_the_model(seeded: Path, monkeypatch) -> None:
    at = _app(seeded, monkeypatch, "pages/projection.py")
    runs = _runs(seeded)
    found, lacking = projection.estimates(runs, 150, "mean", by="series")
    table = projection.project(
        {k: e.seconds for k, e in found.items()}, trajectories=1_000_000, workers=1_000
    )
    shown = at.dataframe[0].value
    assert shown["substrate"].tolist() == table["substrate"].tolist()
    assert shown["worker_hours"].tolist() == pytest.approx(table["worker_hours"].tolist())
    assert shown["wall_clock_hours"].tolist() == pytest.approx(table["wall_clock_hours"].tolist())
    assert "kubernetes [emulated]" in lacking
    assert any("kubernetes [emulated]" in w.value for w in at.warning)
    scenarios = at.dataframe[1].value
    assert [round(h) for h in scenarios["model_hours"]] == [
        s.published_hours for s in published.SCENARIOS
    ]
    # moving the inputs moves the answer, linearly
    at.number_input(key="proj_trajectories").set_value(2_000_000).run()
    doubled = at.dataframe[0].value
    assert doubled["worker_hours"].tolist() == pytest.approx([2 * h for h in table["worker_hours"]])


def test_the_projection_takes_the_launch_path_and_uses_its_samples(
    tmp_path: Path, monkeypatch
) -> None:
    """docker's 10-action trajectories: cold 8 and 10 s (mean 9), restore 5 and 7 s (mean 6).
    Every path: both series, restore the faster; on the restore path only its series: 1,000
    trajectories on 10 workers are 1,000 x 6 s = 1.667 worker-hours; on the resume path none
    is measured, and the page says so for that path."""
    db = tmp_path / "paths.db"
    with Store(db) as store:
        for i, (launch, episode) in enumerate(
            (("cold", 8.0), ("cold", 10.0), ("restore", 5.0), ("restore", 7.0))
        ):
            store.save_rollout(_record(i, "docker", "T2", 10, episode, launch_type=launch))
    at = _app(db, monkeypatch, "pages/projection.py")
    _ok(at, "Projection")
    assert at.segmented_control(key="proj_path").value == fleet.EVERY_PATH
    at.number_input(key="proj_trajectories").set_value(1_000)
    at.number_input(key="proj_steps").set_value(10)
    at.number_input(key="proj_workers").set_value(10).run()
    shown = at.dataframe[0].value
    assert shown["substrate"].tolist() == ["docker · restore", "docker"]
    at.segmented_control(key="proj_path").set_value("restore").run()
    shown = at.dataframe[0].value
    assert shown["substrate"].tolist() == ["docker · restore"]
    assert shown["worker_hours"].iloc[0] == pytest.approx(1_000 * 6.0 / 3600)
    at.segmented_control(key="proj_path").set_value("resume").run()
    assert any("on the resume path" in i.value for i in at.info)


def test_the_projection_says_what_changed_since_the_previous_setting(
    seeded: Path, monkeypatch
) -> None:
    """150-action trajectories of docker: 8.5 and 8.52 s (mean 8.51), local 16.8 and 16.82 s
    (mean 16.81). 1 M of them on 1,000 workers: docker 2,363.9 worker-hours (2.36 h of wall
    clock), local 2,305.6 more; twice as many trajectories, twice every figure."""
    at = _app(seeded, monkeypatch, "pages/projection.py")
    assert not any("What changed" in c.value for c in at.caption)  # nothing moved yet
    at.number_input(key="proj_trajectories").set_value(2_000_000).run()
    assert at.select_slider(key="proj_trajectories__slider").value == 2_000_000  # in sync
    changed = [c.value for c in at.caption if c.value.startswith("What changed")]
    assert changed[0] == (
        "What changed: worker-hours of docker 2,364 h → 4,728 h (+100%); extra hours of the "
        "slowest 2,306 h → 4,611 h (+100%); wall clock of docker 2.36 h → 4.73 h (+100%) "
        "since trajectories 1 M → 2 M."
    )
    # the slider moves the exact box to its option; an exact count moves the slider nearest
    at.select_slider(key="proj_trajectories__slider").set_value(50_000_000).run()
    assert at.number_input(key="proj_trajectories").value == 50_000_000
    at.number_input(key="proj_trajectories").set_value(1_234_567).run()
    assert at.select_slider(key="proj_trajectories__slider").value == 1_000_000
    assert at.dataframe[0].value["worker_hours"].iloc[0] == pytest.approx(1_234_567 * 8.51 / 3600)


def _opened(db: Path, monkeypatch: pytest.MonkeyPatch, link: str) -> AppTest:
    """The app opened on `link` (a path and its query), as a browser would."""
    monkeypatch.setenv("RTAX_DB", str(db))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    parts = urlsplit(link)
    for key, values in parse_qs(parts.query).items():
        at.query_params[key] = values
    if parts.path.strip("/"):
        at.switch_page(f"pages/{parts.path.strip('/')}.py")
    return at.run()


def test_a_link_reproduces_the_filters_and_the_inputs(seeded: Path, monkeypatch) -> None:
    """Opened on a URL, the app takes its filters and inputs from it; the footer's link is
    that URL again, and opening it reproduces the table. 50-action trajectories: docker 3.5
    and 3.52 s (p50 3.51), local 5.8 and 5.82 s (p50 5.81): 2 M of them are 1,950 and
    3,227.8 worker-hours at their p50."""
    link = "/projection?f_tiers=T2&proj_trajectories=2000000&proj_steps=50&proj_stat=what-if+p50"
    at = _opened(seeded, monkeypatch, link)
    _ok(at, "Projection")
    assert at.multiselect(key="f_tiers").value == ["T2"]
    assert at.number_input(key="proj_steps").value == 50
    assert at.segmented_control(key="proj_stat").value == "p50"
    table = at.dataframe[0].value
    assert table["substrate"].tolist() == ["docker", "local"]
    assert table["worker_hours"].tolist() == pytest.approx([1950.0, 2e6 * 5.81 / 3600])
    assert at.code[-1].value == link  # the footer's link to this view
    again = _opened(seeded, monkeypatch, at.code[-1].value)
    pd.testing.assert_frame_equal(again.dataframe[0].value, table)
    assert any("Database `" in c.value and "newest run" in c.value for c in at.caption)


def test_every_page_takes_its_inputs_from_the_link(seeded: Path, monkeypatch) -> None:
    at = _opened(seeded, monkeypatch, "/timeline?t_metric=episode&t_bucket=1+d&f_fidelities=real")
    _ok(at, "Timeline")
    assert (at.selectbox(key="t_metric").value, at.selectbox(key="t_bucket").value) == (
        "episode",
        "1 d",
    )
    assert at.multiselect(key="f_fidelities").value == ["real"]
    assert "kubernetes [emulated]" not in at.multiselect(key="t_series").options
    at = _opened(seeded, monkeypatch, "/cold_start?cold_start_log=false&f_incomparable=true")
    assert at.toggle(key="cold_start_log").value is False
    assert at.toggle(key="f_incomparable").value is True
    at = _opened(seeded, monkeypatch, "/amortization?amort_stat=p95&amort_overlay=false")
    assert at.segmented_control(key="amort_stat").value == "p95"
    assert at.toggle(key="amort_overlay").value is False


@pytest.fixture(scope="module")
def skewed(tmp_path_factory) -> Path:
    """One real series, four 150-action trajectories of 1, 1, 1 and 10 s."""
    path = tmp_path_factory.mktemp("skewed") / "skewed.db"
    with Store(path) as store:
        for i, episode in enumerate((1.0, 1.0, 1.0, 10.0)):
            store.save_rollout(_record(i, "local", "T2", 150, episode))
    return path


def test_projection_totals_use_the_mean_and_p50_is_a_what_if(skewed: Path, monkeypatch) -> None:
    """1,000 trajectories of [1, 1, 1, 10] s take 3,250 s (N x mean); the p50 what-if says
    1,000 s and is labelled as one."""
    at = _app(skewed, monkeypatch, "pages/projection.py")
    at.number_input(key="proj_trajectories").set_value(1_000).run()
    assert at.segmented_control(key="proj_stat").value == "mean"  # the default
    row = at.dataframe[0].value.iloc[0]
    assert row["seconds_per_trajectory"] == 3.25
    assert row["worker_hours"] * 3600 == pytest.approx(3_250.0)
    assert row["basis"] == "measured mean at S=150"
    assert any("N × mean" in c.value for c in at.caption)  # the page says why
    assert not any("What-if" in w.value for w in at.warning)
    at.segmented_control(key="proj_stat").set_value("p50").run()
    row = at.dataframe[0].value.iloc[0]
    assert row["worker_hours"] * 3600 == pytest.approx(1_000.0)
    assert row["basis"].startswith("what-if")
    assert any("What-if" in w.value and "not the expected total" in w.value for w in at.warning)


def test_amortization_points_default_to_the_mean(skewed: Path, monkeypatch) -> None:
    at = _app(skewed, monkeypatch, "pages/amortization.py")
    points = at.dataframe[-1].value
    assert points["seconds"].tolist() == [3.25]
    assert points["per_action_s"].tolist() == pytest.approx([3.25 / 150])
    at.segmented_control(key="amort_stat").set_value("p95").run()
    # p95 of [1, 1, 1, 10]: rank 2.85 -> 1 + 0.85 x 9
    assert at.dataframe[-1].value["seconds"].tolist() == pytest.approx([8.65])


def test_amortization_fits_and_crossover(seeded: Path, monkeypatch) -> None:
    at = _app(seeded, monkeypatch, "pages/amortization.py")
    fits = at.dataframe[0].value.set_index("series")
    expected = stats.trajectory_fits(_runs(seeded), by="series")
    for name, fit in expected.items():
        assert fits.loc[name, "per_action_s"] == pytest.approx(fit.per_action_s)
    crossing = at.dataframe[1].value.iloc[0]
    # local: 0.31 + 0.11 S; docker: 1.01 + 0.05 S -> they cross at S = 0.70 / 0.06
    assert (crossing["faster_below"], crossing["faster_above"]) == ("local", "docker")
    assert crossing["crossover_steps"] == pytest.approx(0.70 / 0.06, rel=1e-6)
    at.toggle(key="amort_overlay").set_value(False).run()
    assert not at.exception


def test_filters_survive_page_changes(seeded: Path, monkeypatch) -> None:
    """A filter chosen once applies on every page. (AppTest drops the entrypoint's sidebar
    from its element tree after the first run, so the choice is made through session state
    here; the browser test clicks the real widget.)"""
    monkeypatch.setenv("RTAX_DB", str(seeded))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    at.session_state["f_tiers"] = ["T2"]
    at.run()
    assert at.multiselect(key="f_tiers").value == ["T2"]
    assert set(at.dataframe[0].value["tier"]) == {"T2"}
    at.switch_page("pages/decomposition.py").run()
    assert {w.split()[0] for w in at.dataframe[0].value["workload"]} == {"T2"}
    at.switch_page("pages/overview.py").run()
    assert set(at.dataframe[0].value["tier"]) == {"T2"}
    assert any("tiers: T2" in c.value for c in at.caption)


def test_data_page_downloads(seeded: Path, monkeypatch) -> None:
    at = _app(seeded, monkeypatch, "pages/data.py")
    _ok(at, "Data")
    n_runs = len(_runs(seeded))
    assert f"{n_runs:,} runs" in at.caption[0].value
    key = (None, (), (), (), ())
    runs_csv = pd.read_csv(io.BytesIO(data.csv_of(str(seeded), key, "runs")))
    assert len(runs_csv) == n_runs and runs_csv["run_id"].is_unique
    actions_csv = pd.read_csv(io.BytesIO(data.csv_of(str(seeded), key, "actions")))
    assert len(actions_csv) == 2 * n_runs  # each seeded run: one ready row, one action row
    assert "data dictionary" in " ".join(h.value.lower() for h in at.subheader)


def test_window_filter(seeded: Path) -> None:
    st.cache_data.clear()
    everything = data.runs(str(seeded), (None, (), (), (), ()))
    # The seeded runs are a minute apart, counted back from NOW (module import, maybe minutes
    # ago in a long suite): a window reaching 10 minutes before NOW holds about 10 of them.
    since_seeding = (datetime.now(UTC) - NOW).total_seconds()
    recent = data.runs(str(seeded), (int(600 + since_seeding), (), (), (), ()))
    assert 0 < len(recent) < len(everything)
    assert math.isclose(len(recent), 10, abs_tol=1)


def test_overview_shows_rolled_up_history(tmp_path: Path, monkeypatch) -> None:
    from rtax.store import retention

    db = tmp_path / "folded.db"
    old = NOW - timedelta(days=40)
    with Store(db) as store:
        for i, ep in enumerate((0.2, 0.3, 0.25, 0.22, 0.4)):
            record = make_record(
                f"old{i}",
                substrate="docker",
                episode_s=ep,
                started_at=(old + timedelta(minutes=i)).isoformat(),
            )
            store.save_rollout(record)
        store.save_rollout(_record(99, "docker", "T0", 0, 0.3))
        retention.fold(store, older_than_days=30, now=NOW)
        assert store.runs.count() == 1
    at = _app(db, monkeypatch)
    _ok(at, "Overview")
    # One table over raw and folded history alike (the store's summaries cover both), and
    # the page says that rolled-up history is in it.
    assert any("Includes rolled-up history" in c.value for c in at.caption)
    history = at.dataframe[0].value.iloc[0]
    assert (history["series"], history["episode_n"], history["runs"]) == ("docker", 6, 6)
    # Rolled up or raw, the same samples give the same percentiles (one rule, exact up to the
    # sketch's limit): sorted [0.2, 0.22, 0.25, 0.3, 0.3, 0.4], p50 at rank 2.5 -> 0.275.
    episodes = [0.2, 0.3, 0.25, 0.22, 0.4, 0.3]
    assert history["episode_p50_s"] == stats.percentile(episodes, 50)
    assert history["episode_p50_s"] == pytest.approx(0.275)
    assert history["episode_p95_s"] == stats.percentile(episodes, 95)
    assert any("exactly the raw answer" in c.value for c in at.caption)


def test_overview_shows_todays_spend_beside_budgets(tmp_path: Path, monkeypatch) -> None:
    """The overview's spend table is the store's spend since midnight UTC beside the configured
    budgets, with the scheduler's own verdict (rtax.service.budget)."""
    db = tmp_path / "spend.db"
    now = datetime.now(UTC)
    with Store(db) as store:
        for i, wall in enumerate((60.0, 120.0)):
            store.save_rollout(
                make_record(
                    f"k{i}",
                    substrate="kubernetes",
                    kind="kubernetes",
                    fidelity="emulated",
                    wall_s=wall,
                    started_at=now.isoformat(timespec="microseconds"),
                )
            )
        store.save_rollout(  # yesterday's: not today's spend
            make_record("old", substrate="kubernetes", started_at="2020-01-01T00:00:00+00:00")
        )
    conf = tmp_path / "rtax.toml"
    conf.write_text(
        '[[substrates]]\nname = "kubernetes"\nkind = "kubernetes"\nmax_rollouts_per_day = 2\n'
        "max_env_minutes_per_day = 10\n"
    )
    monkeypatch.setenv("RTAX_CONFIG", str(conf))
    at = _app(db, monkeypatch)
    _ok(at, "Overview")
    assert any(s.value == "Spent today (UTC)" for s in at.subheader)
    spend = at.dataframe[-1].value.set_index("substrate")
    assert spend.loc["kubernetes", "rollouts"] == 2
    assert spend.loc["kubernetes", "env_minutes"] == pytest.approx(3.0)
    assert spend.loc["kubernetes", "fidelity"] == "emulated"
    assert spend.loc["kubernetes", "status"].startswith("budget used up")


def test_fidelity_note_only_when_something_is_not_real() -> None:
    assert tables.fidelity_note(["real", "real"]) is None
    note = tables.fidelity_note(["real", "emulated", "modelled"])
    assert "**emulated**" in note and "**modelled**" in note


@pytest.fixture(scope="module")
def mixed_toolchains(tmp_path_factory) -> Path:
    """T0 episodes by hand: local (toolchain "floor") 1.0, 1.0 s; docker on the floor's toolchain
    2.0, 2.0 s; docker-old on another toolchain 8.0, 8.0 s; kind local gives the floor."""
    path = tmp_path_factory.mktemp("toolchains") / "mixed.db"
    with Store(path) as store:
        i = 0
        for substrate, kind, digest, episode in (
            ("local", "local", "floor", 1.0),
            ("docker", "docker", "floor", 2.0),
            ("docker-old", "docker", "debian", 8.0),
        ):
            for _ in range(2):
                record = _record(i, substrate, "T0", 0, episode, kind=kind)
                record.run["toolchain"] = digest
                store.save_rollout(record)
                i += 1
    return path


def test_a_series_on_another_toolchain_is_marked_and_left_out_of_the_spread(
    mixed_toolchains: Path, monkeypatch
) -> None:
    at = _app(mixed_toolchains, monkeypatch, "pages/cold_start.py")
    _ok(at, "Cold start")
    shown = set(at.dataframe[0].value["series"])
    assert shown == {"local", "docker", "docker-old (toolchain ≠ floor)"}
    # spread over the comparable series only: 2.0 / 1.0
    assert at.metric[0].value == "2.00×"
    # opted in (through session state, set before the first run: AppTest drops the
    # entrypoint's sidebar from its tree after it)
    st.cache_data.clear()
    opted = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    opted.session_state["f_incomparable"] = True
    opted.run()
    opted.switch_page("pages/cold_start.py").run()
    assert opted.metric[0].value == "8.00×"  # 8.0 / 1.0


def test_resolution_is_shown_beside_a_percentile_only_where_it_exceeds_5_percent(
    tmp_path: Path, monkeypatch
) -> None:
    """A polled series (EC2-like: actions detected at 40 ms) beside one that polled nothing:
    the resolution appears only where it exceeds 5 % of the p50 beside it."""
    path = tmp_path / "res.db"
    with Store(path) as store:
        for i, episode in enumerate((1.0, 1.2, 1.1)):
            # episode resolution = orchestration 0.25 + ready 0.04 + actions 0.2 = 0.49 s,
            # the coarsest of the three samples (the others poll finer)
            actions_res = (0.2, 0.1, 0.12)[i]
            store.save_rollout(
                _record(
                    i,
                    "ec2",
                    "T0",
                    0,
                    episode,
                    time_to_first_command_s=10.0,
                    orchestration_res_s=0.25,
                    ready_res_s=0.04,
                    actions_res_s=actions_res,
                    cleanup_res_s=0.25,
                )
            )
        for i, episode in enumerate((0.3, 0.31), start=10):
            store.save_rollout(_record(i, "docker", "T0", 0, episode, cleanup_res_s=0.0))
    at = _app(path, monkeypatch)
    # A column with an empty cell holds its display strings (the grid would draw a missing
    # number as "None"): the resolution reads in the one format, and blank where not shown.
    shown = at.dataframe[0].value.set_index("series")
    # episode p50 1.1 s: 0.25 + 0.04 + 0.2 = 0.49 s > 5 % of it -> shown; ttfc p50 10 s:
    # 0.29 s < 0.5 s -> not
    assert shown.loc["ec2", "episode_res_s"] == "490 ms"
    assert shown.loc["ec2", "ttfc_res_s"] == ""
    assert shown.loc["docker", "episode_res_s"] == ""  # nothing polled: nothing shown

    at.switch_page("pages/decomposition.py").run()
    phases = at.dataframe[0].value.set_index(["series", "phase"])
    assert phases.loc[("ec2", "cleanup"), "res_s"] == "250 ms"
    assert phases.loc[("ec2", "actions"), "res_s"] == "200 ms"
    assert phases.loc[("ec2", "create"), "res_s"] == ""
    assert phases.loc[("docker", "cleanup"), "res_s"] == ""  # polled, detected at once

    at.switch_page("pages/cold_start.py").run()
    cold = at.dataframe[0].value.set_index("series")
    assert cold.loc["ec2", "res_s"] == "490 ms"


def test_disclosed_is_the_5_percent_rule() -> None:
    assert tables.disclosed(0.051, 1.0) == 0.051
    assert math.isnan(tables.disclosed(0.05, 1.0))
    assert math.isnan(tables.disclosed(math.nan, 1.0))
    runs = pd.DataFrame({"create_res_s": [None, 0.1], "ready_res_s": [None, 0.02]})
    assert math.isnan(tables.resolution_of(runs, "time_to_first_command_s")[0])
    assert tables.resolution_of(runs, "time_to_first_command_s")[1] == pytest.approx(0.12)


def _fleet_db(tmp_path: Path) -> Path:
    """docker: seven cold starts (time to first command) of exactly 1 s: five T0 runs whose
    wall is 1.5 s (each runs on half its time to first command after it: `busy_share` 0.5),
    and two 10-action trajectories of 1 s and 10 s whose wall is 10 s and actions 6 s on
    average."""
    db = tmp_path / "fleet.db"
    with Store(db) as store:
        for i in range(5):
            store.save_rollout(
                _record(
                    i,
                    "docker",
                    "T0",
                    0,
                    1.5,
                    kind="docker",
                    time_to_first_command_s=1.0,
                    wall_s=1.5,
                )
            )
        for i, (episode, wall, actions, ttfc) in enumerate(
            ((1.0, 8.0, 5.0, 1.0), (10.0, 12.0, 7.0, 1.0))
        ):
            store.save_rollout(
                _record(
                    10 + i,
                    "docker",
                    "T2",
                    10,
                    episode,
                    kind="docker",
                    wall_s=wall,
                    actions_s=actions,
                    time_to_first_command_s=ttfc,
                )
            )
    return db


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def _inputs(at: AppTest, **values: float) -> None:
    """Set the page's number inputs by key, then run it once."""
    for key, value in values.items():
        at.number_input(key=key).set_value(value)
    at.run()


def _frame(at: AppTest, column: str) -> pd.DataFrame:
    """The page's table that has `column` (the Projection shows several)."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_projection_sizes_a_warm_pool_from_the_measured_cold_starts(
    tmp_path: Path, monkeypatch
) -> None:
    """Cold starts of exactly 1 s, 2 ready, a burst of 5, one refill at a time: the claims
    wait [0, 0, 1, 2, 3] s in every repeat, so over the 200 repeats pooled p50 = 1 s and
    p95 = 3 s, the pool always drains and the mean wait is 1.2 s."""
    monkeypatch.setenv("RTAX_CONFIG", str(tmp_path / "none.toml"))
    at = _app(_fleet_db(tmp_path), monkeypatch, "pages/projection.py")
    _ok(at, "Projection")
    at.number_input(key="proj_pool_size").set_value(2)
    at.number_input(key="proj_pool_refill").set_value(1)
    at.number_input(key="proj_pool_claims").set_value(5)
    at.selectbox(key="proj_pool_shape").set_value("burst").run()
    assert at.selectbox(key="proj_pool_series").value == "docker"
    assert _metric(at, "Claim p50") == "1.00 s" and _metric(at, "Claim p95") == "3.00 s"
    assert _metric(at, "Chance the pool drains") == "100%"
    assert _metric(at, "Mean wait") == "1.20 s"
    assert any("n=7 measured cold starts" in c.value for c in at.caption)
    at.number_input(key="proj_pool_size").set_value(5).run()  # a pool as large as the burst
    assert _metric(at, "Chance the pool drains") == "0%"
    # the real pool's bounds: refills at most its size; 0 is no pool, not a model input
    at.number_input(key="proj_pool_refill").set_value(5).run()
    at.number_input(key="proj_pool_size").set_value(2).run()
    _ok(at, "Projection")
    refill = at.number_input(key="proj_pool_refill")
    assert refill.proto.max == 2 and refill.value == 2
    at.number_input(key="proj_pool_size").set_value(0).run()
    _ok(at, "Projection")
    assert any("Pool size 0: no pool" in i.value for i in at.info)
    assert not any(m.label == "Claim p50" for m in at.metric)


def test_a_burst_draws_its_refills_at_the_level_its_refills_run_at(
    tmp_path: Path, monkeypatch
) -> None:
    """Load runs measured docker's cold starts at 1 s one at a time, 3 s two at once and 9 s
    fifty at once. A burst of 5 on a pool of 2 refilled one at a time keeps 1.5 environments
    at work (the refill, and the rollout it served for half that time: docker's quiet T0 runs
    spend 0.5 s after their 1 s to the first command), so its refills take halfway between
    one and two at once, 2 s: the claims wait [0, 0, 2, 4, 6] s, p50 2 s and p95 6 s, not the
    quiet [0, 0, 1, 2, 3] nor fifty-at-once's; a staggered load keeps the quiet samples, and
    the caption says which were drawn."""
    monkeypatch.setenv("RTAX_CONFIG", str(tmp_path / "none.toml"))
    db = _fleet_db(tmp_path)
    started = (NOW - timedelta(minutes=30)).isoformat()
    with Store(db) as store:
        store_load(store, "one", "sequential", 1, [1.0] * 3, started_at=started)
        store_load(store, "two", "burst", 2, [3.0] * 4, ["harness_error"], started_at=started)
        store_load(store, "fifty", "burst", 50, [9.0] * 5, started_at=started)
    at = _app(db, monkeypatch, "pages/projection.py")
    _inputs(at, proj_pool_size=2, proj_pool_refill=1, proj_pool_claims=5)
    at.selectbox(key="proj_pool_shape").set_value("burst").run()
    assert _metric(at, "Claim p50") == "2.00 s" and _metric(at, "Claim p95") == "6.00 s"
    assert any("at 1.5 at once, read off load runs" in c.value for c in at.caption)
    assert any("busy 50% of that time" in c.value for c in at.caption)
    assert not any("upper bound" in c.value for c in at.caption)  # validated at R <= 2
    _inputs(at, proj_pool_size=8)  # refills are bounded by the size on screen: size first
    _inputs(at, proj_pool_refill=4, proj_pool_claims=32)
    assert any("(4 refills and" in c.value for c in at.caption)
    assert any("read it as an upper bound" in c.value for c in at.caption)  # not at R 4
    _inputs(at, proj_pool_size=2, proj_pool_refill=1, proj_pool_claims=5)
    at.selectbox(key="proj_pool_shape").set_value("staggered").run()
    assert any("n=7 measured cold starts" in c.value for c in at.caption)
    assert any("quiet cold starts" in c.value for c in at.caption)


def test_projection_step_time_is_the_expected_max_beside_the_mean(
    tmp_path: Path, monkeypatch
) -> None:
    """Rollouts of 1 s and 10 s: a step of 2 waits 1/4 x 1 + 3/4 x 10 = 7.75 s, against a
    naive 5.5 s; launching 3 and keeping the first 2 brings it to 5.5 s. Two samples are too
    few for a tail: the page says the figure is extrapolated, and shows no interval."""
    monkeypatch.setenv("RTAX_CONFIG", str(tmp_path / "none.toml"))
    at = _app(_fleet_db(tmp_path), monkeypatch, "pages/projection.py")
    at.selectbox(key="proj_step_workload").set_value(("T2", 10))
    at.number_input(key="proj_step_batch").set_value(1)
    at.number_input(key="proj_step_group").set_value(2).run()
    assert _metric(at, "Expected step time, E[max of 2]") == "7.75 s"
    assert _metric(at, "Naive: the mean rollout") == "5.50 s"
    assert any("Extrapolated, no interval: 2 measured rollouts" in w.value for w in at.warning)
    at.number_input(key="proj_step_oversample").set_value(0.5).run()
    assert _metric(at, "Expected step time, E[2nd to finish of 3]") == "5.50 s"
    assert _metric(at, "Launched per step") == "3"


def test_projection_without_limits_or_prices_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RTAX_CONFIG", str(tmp_path / "none.toml"))
    at = _app(_fleet_db(tmp_path), monkeypatch, "pages/projection.py")
    assert any("No limits or prices are configured" in i.value for i in at.info)


def test_projection_turns_limits_and_prices_into_floor_billed_and_dollars(
    tmp_path: Path, monkeypatch
) -> None:
    """1,000 trajectories of 10 actions on 10 workers, no pool, mean wall 10 s and actions 6 s:
    floors 1,000 / 5 = 200 s (creates), 10,000 / 100 = 100 s (concurrency), 10,000 / 10 =
    1,000 s (workers: binding); billed 10,000 s, useful 6,000 s; 2 vCPU x $0.05 + 4 GiB x
    $0.01 = $0.14 per hour x 10,000 / 3,600 h = $0.3889, $388.89 per million."""
    conf = tmp_path / "rtax.toml"
    conf.write_text(
        '[[substrates]]\nname = "docker"\nkind = "docker"\n'
        "limits = { max_concurrent = 100, creates_per_s = 5 }\n"
        "[substrates.prices]\nvcpus = 2\nmemory_gib = 4\n"
        'per_vcpu_hour = { usd = 0.05, source = "https://example.invalid/p", date = 2026-01-02 }\n'
        'per_gib_hour = { usd = 0.01, source = "https://example.invalid/p", date = 2026-01-02 }\n'
    )
    monkeypatch.setenv("RTAX_CONFIG", str(conf))
    at = _app(_fleet_db(tmp_path), monkeypatch, "pages/projection.py")
    _inputs(at, proj_trajectories=1_000, proj_steps=10, proj_workers=10, proj_pool_size=0)
    _ok(at, "Projection")
    row = _frame(at, "binding").iloc[0]
    assert (row["series"], row["n"], row["binding"]) == ("docker", 2, "workers")
    assert row["floor_hours"] * 3600 == pytest.approx(1_000)
    assert row["billed_hours"] * 3600 == pytest.approx(10_000)
    assert row["useful_hours"] * 3600 == pytest.approx(6_000)
    assert row["useful_share"] == pytest.approx(0.6)
    assert row["usd"] == pytest.approx(0.14 * 10_000 / 3600)
    assert row["usd_per_million"] == pytest.approx(388.89, abs=0.01)
    assert row["prices_unset"] == "per_instance_hour, per_request"
    # a pool of 10 over the 1,000 s floor adds 10 x 1,000 - 1,000 x 1 s = 9,000 idle seconds
    at.number_input(key="proj_pool_size").set_value(10).run()
    row = _frame(at, "binding").iloc[0]
    assert row["billed_hours"] * 3600 == pytest.approx(19_000)
    # a pool as large as the account's concurrency leaves no slot for a rollout: said, not run
    at.number_input(key="proj_pool_size").set_value(100).run()
    _ok(at, "Projection")
    assert _frame(at, "binding").iloc[0]["binding"] == "a pool of 100 takes all 100 slots"


def test_the_same_substrate_from_two_vantages_is_compared_and_filtered(
    tmp_path: Path, monkeypatch
) -> None:
    """docker probed from eu (time to first command 0.2, 0.4 s: p50 0.3) and from us (0.6,
    0.9, 1.2 s: p50 0.9), local only from here: two docker series, side by side in the
    Overview's vantage table (us is 3x the nearest), and the sidebar's vantage filter keeps
    one (docs/ray.md#vantages)."""
    db = tmp_path / "vantages.db"
    samples = [("eu", 0.2), ("eu", 0.4), ("us", 0.6), ("us", 0.9), ("us", 1.2)]
    with Store(db) as store:
        for i, (vantage, ttfc) in enumerate(samples):
            store.save_rollout(
                _record(
                    i, "docker", "T0", 0, ttfc + 0.1, time_to_first_command_s=ttfc, vantage=vantage
                )
            )
        store.save_rollout(_record(9, "local", "T0", 0, 0.03, time_to_first_command_s=0.01))
    at = _app(db, monkeypatch)
    overview = at.dataframe[0].value
    assert set(overview["series"]) == {"docker @ eu", "docker @ us", "local"}
    seen = at.dataframe[1].value.set_index("vantage")
    assert list(seen.index) == ["eu", "us"]  # nearest first; local was seen from one place
    assert seen.loc["eu", "ttfc_p50_s"] == pytest.approx(0.3)
    assert seen.loc["us", "ttfc_p50_s"] == pytest.approx(0.9)
    assert seen["ttfc_vs_nearest"].tolist() == pytest.approx([1.0, 3.0])
    assert seen["ttfc_n"].tolist() == [2, 3]
    st.cache_data.clear()
    only = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    only.session_state["f_vantages"] = ["us"]
    only.run()
    assert set(only.dataframe[0].value["series"]) == {"docker @ us"}
    assert any("vantage: us" in c.value for c in only.caption)


def test_projection_prices_a_successful_rollout_with_failures_retries_billing_and_pool(
    tmp_path: Path, monkeypatch
) -> None:
    """tests/test_pricing.py's hand-worked case through the page: nine attempts of 100.4 s
    succeed and one fails after 30 s, one retry, a 60 s minimum then per second, 10 pooled
    environments idle an hour each over 1,000 rollouts, 1 vCPU at $0.36 an hour: $14,403 per
    million successful rollouts, against $10,040 from the environment-hour price alone."""
    conf = tmp_path / "rtax.toml"
    conf.write_text(
        '[[substrates]]\nname = "docker"\nkind = "docker"\n'
        "[substrates.prices]\nvcpus = 1\n"
        'per_vcpu_hour = { usd = 0.36, source = "https://example.invalid/p", date = 2026-05-01 }\n'
        "billing = { minimum_s = 60, granularity_s = 1, "
        'source = "https://example.invalid/billing", date = 2026-05-01 }\n'
    )
    monkeypatch.setenv("RTAX_CONFIG", str(conf))
    db = tmp_path / "priced.db"
    with Store(db) as store:
        for i in range(10):
            failed = i == 9
            store.save_rollout(
                _record(
                    i,
                    "docker",
                    "T2",
                    10,
                    20.0,
                    kind="docker",
                    wall_s=30.0 if failed else 100.4,
                    status="failed" if failed else "ok",
                    error_class="create_failed" if failed else None,
                )
            )
    at = _app(db, monkeypatch, "pages/projection.py")
    _inputs(
        at,
        proj_trajectories=1_000,
        proj_steps=10,
        proj_cost_retries=1,
        proj_cost_idle_h=1.0,
        proj_pool_size=10,
    )
    _ok(at, "Projection")
    row = _frame(at, "usd_per_million_successful").iloc[0]
    assert (row["series"], row["attempts"]) == ("docker", 10)
    assert row["success_rate"] == pytest.approx(0.9)
    assert row["attempts_per_success"] == pytest.approx(1.1 / 0.99)
    assert row["usd_per_million_successful"] == pytest.approx(14_403.03, abs=0.01)
    assert row["usd_per_million_env_hour"] == pytest.approx(10_040.0)
    assert row["difference"] == pytest.approx(14_403.03 / 10_040 - 1, abs=1e-6)
    assert (
        row["billing"] == "60 s minimum, then per 1 s (https://example.invalid/billing, 2026-05-01)"
    )
    assert any("a pool of 10 idle 1 h each" in c.value for c in at.caption)


def test_a_step_waits_for_the_substrates_failures_not_for_rtaxs_own() -> None:
    """A failed create holds a step to its deadline; a harness error is rtax's own and holds
    no step (stats.attempts), so only the first is among a series' failures."""
    rows = pd.DataFrame(
        {
            "series": ["docker"] * 4,
            "tier": ["T0"] * 4,
            "steps": [0] * 4,
            "status": ["ok", "ok", "failed", "failed"],
            "error_class": [None, None, "create_failed", "harness_error"],
            "episode_s": [1.0, 2.0, 0.5, 0.7],
        }
    )
    ((ok, failed),) = fleet.outcomes(rows, "episode_s", tier="T0", steps=0).values()
    assert sorted(ok) == [1.0, 2.0] and list(failed) == [0.5]
