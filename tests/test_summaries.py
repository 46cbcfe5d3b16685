"""Per-series summaries (rtax.analysis.summaries) agree with the raw path (rtax.analysis.stats
through rtax.dashboard.tables) on a fixed database: after saves, after a fold, after a rebuild, and
on an upgraded old file; and merging hourly rows equals summarizing the whole."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlite_utils
from hypothesis import given, settings
from hypothesis import strategies as st

from factories import make_record
from polling import DEADLINE_S
from rtax.analysis import sketch, stats, summaries
from rtax.core.record import RolloutRecord
from rtax.dashboard import summarized, tables
from rtax.store import Store, migrations, retention

BASE = datetime(2026, 1, 1, tzinfo=UTC)
#: (substrate, kind, mode, fidelity, tier, steps, runs, median episode s)
SERIES = (
    ("local", "local", "exec", "real", "T0", 0, 300, 0.02),  # past the sketch's exact limit
    ("docker", "docker", "exec", "real", "T0", 0, 40, 0.3),
    ("docker", "docker", "session", "real", "T0", 0, 20, 0.25),
    ("kubernetes", "kubernetes", "exec", "emulated", "T0", 0, 15, 1.5),
    ("local", "local", "exec", "real", "T2", 10, 12, 1.4),
    ("local", "local", "exec", "real", "T2", 50, 12, 5.8),
    ("docker", "docker", "exec", "real", "T2", 10, 12, 1.5),
    ("docker", "docker", "exec", "real", "T2", 50, 12, 3.5),
)
#: Series claimed from a warm pool: the same substrates, another series each.
WARM = (
    ("docker", "docker", "exec", "real", "T0", 0, 30, 0.05),
    ("docker", "docker", "exec", "real", "T2", 10, 12, 1.2),
    ("docker", "docker", "exec", "real", "T2", 50, 12, 3.2),
)


def _records():
    """Runs spread over 30 hours (so rows merge across hours and days), 5 % failed, a few harness
    errors (never a substrate's), milestones and resolutions."""
    rng = np.random.default_rng(7)
    i = 0
    series = [(*row, "cold") for row in SERIES] + [(*row, "warm") for row in WARM]
    for substrate, kind, mode, fidelity, tier, steps, n, median, launch in series:
        warm = launch == "warm"
        for _ in range(n):
            i += 1
            episode = float(rng.lognormal(math.log(median), 0.5))
            ttfc = episode * float(rng.uniform(0.2, 0.6))
            draw = rng.random()
            failed = draw < 0.05
            harness = 0.05 <= draw < 0.07
            started = BASE + timedelta(seconds=float(rng.uniform(0, 30 * 3600)))
            start = {"create_s": ttfc * 0.3, "ready_s": ttfc * 0.7}
            if warm:  # claimed: nothing made in the run, then its first command
                start = {
                    "claim_s": ttfc * 0.8,
                    "create_s": None,
                    "orchestration_s": None,
                    "ready_s": ttfc * 0.2,
                }
            yield make_record(
                f"r{i:04d}",
                phases=("ready", *("action",) * int(rng.integers(1, 4))),
                launch_type=launch,
                **start,
                substrate=substrate,
                kind=kind,
                mode=mode,
                fidelity=fidelity,
                tier=tier,
                steps=steps,
                started_at=started.isoformat(timespec="microseconds"),
                status="failed" if failed or harness else "ok",
                error_class="harness_error" if harness else ("ready_timeout" if failed else None),
                episode_s=None if failed else episode,
                time_to_first_command_s=ttfc,
                ready_res_s=0.05 if substrate == "kubernetes" else None,
                milestones=f'[{{"name": "created", "t_s": {ttfc * 0.3}}}]',
            )


def _saved(folder: Path, records: Iterable[RolloutRecord]) -> Path:
    """A store in `folder` holding `records`, saved the way the scheduler saves them."""
    path = folder / "store.db"
    with Store(path) as store:
        for record in records:
            store.save_rollout(record)
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return _saved(tmp_path_factory.mktemp("summaries"), _records())


def _raw(store: Store) -> pd.DataFrame:
    return stats.add_series(store.runs.read(), store.runs.floor_toolchain())


def _rows(store: Store, **query) -> pd.DataFrame:
    return summaries.label(store.summaries.read(**query), store.runs.floor_toolchain())


def _close(shown: pd.Series, expected: pd.Series, n: pd.Series) -> None:
    """Exact where a row holds at most EXACT_LIMIT samples, within ALPHA beyond."""
    for s, e, k in zip(shown, expected, n, strict=True):
        if k == 0 or math.isnan(e):  # no samples, or too few for the figure (p99)
            assert math.isnan(s) and math.isnan(e)
        elif k <= sketch.EXACT_LIMIT:
            assert s == e
        else:
            assert s == pytest.approx(e, rel=sketch.ALPHA)


def _agree(rows: pd.DataFrame, runs: pd.DataFrame) -> None:
    """Every table the pages show, from summaries, against the raw path."""
    now = BASE + timedelta(days=1)
    shown, expected = summarized.overview(rows, now), tables.overview(runs, now)
    assert list(shown.columns) == list(expected.columns)
    exact = ["series", "tier", "steps", "fidelity", "runs", "harness_errors", "ttfc_n"]
    exact += ["episode_n", "ttfc_res_s", "episode_res_s"]
    pd.testing.assert_frame_equal(shown[exact], expected[exact], check_dtype=False)
    assert shown["success_rate"].tolist() == expected["success_rate"].tolist()
    assert shown["last_probe_age_s"].tolist() == pytest.approx(expected["last_probe_age_s"])
    for column in ("ttfc_p50_s", "ttfc_p95_s", "ttfc_p99_s", "ttfc_p99_lo_s", "ttfc_p99_hi_s"):
        _close(shown[column], expected[column], expected["ttfc_n"])
    for column in ("episode_p50_s", "episode_p95_s", "episode_p99_s"):
        _close(shown[column], expected[column], expected["episode_n"])

    shown, expected = summarized.cold_start_all(rows), tables.cold_start_all(runs)
    assert shown[["tier", "series", "runs", "n"]].values.tolist() == (
        expected[["tier", "series", "runs", "n"]].values.tolist()
    )
    assert shown["mean"].tolist() == pytest.approx(expected["mean"].tolist())
    for q in ("p50", "p95", "p99"):
        _close(shown[q], expected[q], expected["n"])

    shown = summarized.phase_means(rows)
    expected = stats.phase_means(runs, by=("series", "workload"))
    assert shown[["series", "workload", "n"]].values.tolist() == (
        expected[["series", "workload", "n"]].values.tolist()
    )
    for column in expected.columns[3:]:
        assert shown[column].tolist() == pytest.approx(expected[column].tolist(), nan_ok=True)

    shown, expected = summarized.phase_percentiles(rows), tables.phase_percentiles(runs)
    keys = ["series", "workload", "phase", "n", "success_rate"]
    assert shown[keys].values.tolist() == expected[keys].values.tolist()
    _close(shown["p95"], expected["p95"], expected["n"])

    shown, expected = summarized.trajectory_points(rows), tables.trajectory_points(runs)
    assert shown[["series", "steps", "runs", "n"]].values.tolist() == (
        expected[["series", "steps", "runs", "n"]].values.tolist()
    )
    assert shown["seconds"].tolist() == pytest.approx(expected["seconds"].tolist())
    shown, expected = summarized.fits(rows), tables.fits(runs)
    for column in ("fixed_s", "per_action_s", "n"):
        assert shown[column].tolist() == pytest.approx(expected[column].tolist())


def test_summaries_after_saves_agree_with_the_raw_path(db: Path) -> None:
    with Store(db, read_only=True) as store:
        runs, rows = _raw(store), _rows(store)
        milestones = store.runs.milestone_means()
    _agree(rows, runs)
    shown = summarized.milestones(rows)
    assert shown["n"].tolist() == milestones["n"].tolist()
    assert shown["mean_t_s"].tolist() == pytest.approx(milestones["mean_t_s"].tolist())
    found, lacking = summarized.estimates(rows, 150)
    want, want_lacking = __import__("rtax.planning.projection").planning.projection.estimates(
        runs, 150, by="series"
    )
    assert set(lacking) == set(want_lacking)
    assert {k: v.seconds for k, v in found.items()} == pytest.approx(
        {k: v.seconds for k, v in want.items()}
    )


def test_warm_and_cold_starts_are_two_series_on_every_table(db: Path) -> None:
    """A warm pool's claims and the same substrate's cold starts are never one figure: each
    table has both series, the warm one's time to first command is its claims' alone."""
    with Store(db, read_only=True) as store:
        rows, runs = _rows(store), _raw(store)
    overview = summarized.overview(rows).set_index(["series", "tier", "steps"])
    warm_t0, cold_t0 = overview.loc[("docker · warm", "T0", 0)], overview.loc[("docker", "T0", 0)]
    claims = runs[(runs["launch_type"] == "warm") & (runs["tier"] == "T0")]
    ok = claims[claims["status"] == "ok"]
    assert (
        warm_t0["ttfc_n"] == len(ok)
        and warm_t0["runs"] == (claims["error_class"] != "harness_error").sum()
    )
    ttfc = ok["claim_s"] + ok["ready_s"]
    assert warm_t0["ttfc_p50_s"] == pytest.approx(float(np.percentile(ttfc, 50)))
    assert (
        cold_t0["ttfc_n"]
        == 40
        - (runs[(runs["series"] == "docker") & (runs["tier"] == "T0")]["status"] != "ok").sum()
    )
    phases = summarized.phase_percentiles(rows)
    warm = set(phases.loc[phases["series"] == "docker · warm", "phase"])
    cold = set(phases.loc[phases["series"] == "docker", "phase"])
    assert {"claim", "ready"} <= warm and not warm & {"create", "orchestration"}
    assert "claim" not in cold and {"create", "orchestration", "ready"} <= cold


def test_a_window_is_exact_at_its_edge(db: Path) -> None:
    """A window starting mid-hour: whole hours from the table, the rest from raw runs."""
    since = (BASE + timedelta(hours=2, minutes=17)).isoformat(timespec="microseconds")
    with Store(db, read_only=True) as store:
        rows, runs = _rows(store, since=since), _raw(store)
        counted = store.runs.count_actions(since=since)
    runs = runs[runs["started_at"] >= since]
    _agree(rows, runs)
    assert int(rows.loc[rows["metric"] == summaries.ACTION_ROWS, "sum"].sum()) == counted


def test_summaries_survive_a_fold_and_a_rebuild(db: Path, tmp_path: Path) -> None:
    path = tmp_path / "folded.db"
    path.write_bytes(db.read_bytes())
    with Store(path) as store:
        before_runs, before_rows = _raw(store), store.summaries.read()
        report = retention.fold(
            store, older_than_days=1, now=BASE + timedelta(days=1, hours=3), pause_s=0
        )
        assert 0 < report.runs < len(before_runs)  # part folded, part raw
        # The fold deletes raw rows, never summaries: the same history, continuous.
        after = store.summaries.read()
        pd.testing.assert_frame_equal(after, before_rows)
        _agree(_rows(store), before_runs)
        # Repair: rebuilt from the raw runs left and the rollups, the percentiles, counts and
        # means of the whole history come back (rollups keep no milestones or sums of squares).
        store.summaries.rebuild()
        rebuilt = _rows(store)
    now = BASE + timedelta(days=1)
    shown, expected = summarized.overview(rebuilt, now), tables.overview(before_runs, now)
    for column in ("series", "runs", "harness_errors", "ttfc_n", "episode_n", "success_rate"):
        assert shown[column].tolist() == expected[column].tolist()
    for column in ("episode_p50_s", "episode_p95_s"):
        _close(shown[column], expected[column], expected["episode_n"])


def test_rebuild_equals_the_rows_kept_as_data_arrived(db: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy.db"
    path.write_bytes(db.read_bytes())
    with Store(path) as store:
        kept = store.summaries.read().sort_values([*summaries.KEY, "metric"]).reset_index(drop=True)
        store.summaries.rebuild()
        rebuilt = store.summaries.read().sort_values([*summaries.KEY, "metric"])
    rebuilt = rebuilt.reset_index(drop=True)
    exact = [c for c in summaries.COLUMNS if c not in ("sum", "sumsq")]
    pd.testing.assert_frame_equal(rebuilt[exact], kept[exact])
    assert rebuilt["sum"].tolist() == pytest.approx(kept["sum"].tolist())


def test_an_old_file_is_upgraded_with_its_summaries_built(db: Path, tmp_path: Path) -> None:
    """A version-6 file (raw runs and rollups, no summaries) gains them on upgrade."""
    path = tmp_path / "v6.db"
    old = sqlite_utils.Database(path)
    for version, migration in migrations.MIGRATIONS:
        if version <= 6:
            migration(old)
    old.execute("PRAGMA user_version = 6")
    old.conn.commit()
    old.conn.close()
    with Store(db, read_only=True) as source:
        runs = source.runs.read()
        actions = source.runs.actions()
    raw = sqlite_utils.Database(path)
    columns = [c for c in runs.columns if c in raw["runs"].columns_dict]  # a v6 file's only
    raw["runs"].insert_all(runs[columns].to_dict("records"))
    columns = [c for c in actions.columns if c in raw["actions"].columns_dict]
    raw["actions"].insert_all(actions[columns].to_dict("records"))
    raw.conn.close()
    with Store(path) as store:
        assert store.version == migrations.SCHEMA_VERSION
        _agree(_rows(store), _raw(store))
        assert store.summaries.read(metrics=[summaries.ACTION_ROWS])["sum"].sum() == len(actions)


def _months_of_runs():
    """Runs every ~3 hours from 20 November to 3 February (a year's edge, three month edges),
    two series, 5 % failed: what a month row must add up to, window by window."""
    rng = np.random.default_rng(11)
    start = datetime(2025, 11, 20, 5, 30, tzinfo=UTC)
    for i in range(600):
        started = start + timedelta(hours=3 * i + float(rng.uniform(0, 2.5)))
        failed = rng.random() < 0.05
        episode = float(rng.lognormal(math.log(0.4), 0.5))
        yield make_record(
            f"m{i:04d}",
            substrate="docker" if i % 2 else "local",
            kind="docker" if i % 2 else "local",
            started_at=started.isoformat(timespec="microseconds"),
            status="failed" if failed else "ok",
            error_class="ready_timeout" if failed else None,
            episode_s=None if failed else episode,
            time_to_first_command_s=episode * 0.4,
        )


@pytest.fixture(scope="module")
def months_db(tmp_path_factory) -> Path:
    return _saved(tmp_path_factory.mktemp("months"), _months_of_runs())


@pytest.mark.parametrize(
    "since",
    [None, "2025-12-17T09:41:00+00:00", "2026-01-29T00:00:00+00:00", "2026-02-02T10:17:00+00:00"],
)
def test_windows_over_month_edges_agree_with_the_raw_path(months_db: Path, since) -> None:
    """Whole months from month rows, then days, hours and the raw edge: every table the pages
    show agrees with the raw runs of the window, from the rows as read and merged into one row
    per key (what the dashboard's cached reader keeps, `summaries.regroup`)."""
    with Store(months_db, read_only=True) as store:
        read = store.summaries.read(since=since)
        floor = store.runs.floor_toolchain()
        runs = _raw(store)
    if since is not None:
        runs = runs[runs["started_at"] >= since]
    assert 0 < len(runs) < 600 or since is None
    buckets = set(read["bucket"])
    # a month row wherever a whole month starts inside the window (February's runs so far)
    assert ("month" in buckets) == (since is None or since < "2026-02-01")
    _agree(summaries.label(read, floor), runs)
    merged = summaries.regroup(read, summaries.WINDOW)
    assert not merged.duplicated(
        [*(k for k in summaries.KEY if k != "bucket_start"), "metric"]
    ).any()
    assert merged.loc[merged["metric"] == "wall_s", "runs"].sum() == len(runs)
    _agree(summaries.label(merged, floor), runs)


def test_month_rows_made_from_day_rows_equal_those_kept_as_data_arrived(
    months_db: Path, tmp_path: Path
) -> None:
    """The migration that added month rows makes them from the day rows (not the runs): the
    same rows, to the last sketch bucket, as saving the runs one by one kept."""
    path = tmp_path / "v13.db"
    path.write_bytes(months_db.read_bytes())
    order = [*summaries.KEY, "metric"]
    with Store(path) as store:
        kept = store.summaries.read()
        assert set(kept["bucket"]) == {"month"} and len(kept)
        store.db.execute("DELETE FROM summaries WHERE bucket = 'month'")
        store.db.execute("PRAGMA user_version = 13")
        store.db.conn.commit()
    with Store(path) as store:
        assert store.version == migrations.SCHEMA_VERSION
        made = store.summaries.read()
    kept, made = (f.sort_values(order).reset_index(drop=True) for f in (kept, made))
    exact = [c for c in summaries.COLUMNS if c not in ("sum", "sumsq")]
    pd.testing.assert_frame_equal(made[exact], kept[exact], check_dtype=False)
    assert made["sum"].tolist() == pytest.approx(kept["sum"].tolist())


def test_a_sketch_read_twice_then_changed_reads_its_new_samples() -> None:
    """`quantile` keeps what it sorted between reads; every change drops it."""
    for values in ([3.0, 1.0, 2.0], list(np.linspace(0.1, 9, 400))):
        s = sketch.Sketch.of(values)
        first = s.quantile(50)
        assert s.quantile(50) == first
        s.add_all([1000.0] * len(values) * 2)
        assert s.quantile(50) > first * 10
        s.merge(sketch.Sketch.of([0.001] * len(values) * 10))
        assert s.quantile(50) < first


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 50, allow_nan=False), min_size=1, max_size=600),
    st.lists(st.integers(0, 5), min_size=1, max_size=600),
)
def test_merging_buckets_equals_the_whole(values: list[float], hours: list[int]) -> None:
    """Summary rows of the same runs, split over hours and merged, equal one row of them all:
    counts, sums and every percentile (exact and bucket mode alike)."""
    runs = []
    for i, v in enumerate(values):
        start = BASE + timedelta(hours=hours[i % len(hours)], minutes=i % 60)
        runs.append({"run_id": f"r{i}", "substrate": "local", "tier": "T0", "status": "ok",
                     "started_at": start.isoformat(), "episode_s": v})  # fmt: skip
    rows = pd.DataFrame(summaries.rows_of(runs))
    days = rows[(rows["metric"] == "episode_s") & (rows["bucket"] == "day")]
    rows = rows[(rows["metric"] == "episode_s") & (rows["bucket"] == "hour")]
    assert len(days) == 1  # every hour is in one day: its day row is the whole too
    day = summaries.combine(days, ["metric"]).iloc[0]
    merged = summaries.combine(rows, ["metric"]).iloc[0]
    whole = sketch.Sketch.of(values)
    assert merged["n"] == len(values) and merged["runs"] == len(values)
    assert merged["sum"] == pytest.approx(sum(values))
    assert merged["sketch"].exact == whole.exact
    for q in (0, 5, 50, 95, 99, 100):
        assert merged["sketch"].quantile(q) == whole.quantile(q)
        assert day["sketch"].quantile(q) == whole.quantile(q)
    one_by_one = rows.to_dict("records")
    acc = one_by_one[0]
    for row in one_by_one[1:]:
        acc = summaries.merge_row(acc, {**row, "bucket_start": acc["bucket_start"]})
    assert sketch.Sketch.from_json(acc["sketch"]).quantile(95) == whole.quantile(95)


def test_no_page_scans_every_run_or_action(db: Path, monkeypatch) -> None:
    """Every statement a page runs reads runs only through a LIMIT or a started_at lower bound
    (an indexed slice), and actions only through a LIMIT or a list of run ids: the first paint
    never scans the whole of either table (issue 13: fast at scale)."""
    import sqlite3

    import streamlit as streamlit
    from streamlit.testing.v1 import AppTest

    import rtax.store.database

    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(rtax.store.database.sqlite3, "connect", traced)
    monkeypatch.setenv("RTAX_DB", str(db))
    app = str(Path(__file__).resolve().parent.parent / "app.py")
    pages = ("overview", "cold_start", "decomposition", "amortization", "projection", "capacity")
    for page in (*pages, "data"):
        streamlit.cache_data.clear()
        at = AppTest.from_file(app, default_timeout=DEADLINE_S)
        at.run()
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, [e.value for e in at.exception]
    reads = [" ".join(s.split()) for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert any("FROM summaries" in s for s in reads)
    for sql in reads:
        if "FROM runs" in sql or "JOIN runs" in sql:  # load rollouts: by the load_id index
            assert "LIMIT" in sql or "started_at >= " in sql or "load_id IN (" in sql, sql
        if "FROM actions" in sql or "JOIN actions" in sql:
            assert "LIMIT" in sql or "run_id IN (" in sql, sql
