"""The live scheduler: plans run on schedule with their lag recorded, a hanging substrate is cut at
the deadline without stopping the others, one scheduler per database, and a SIGKILLed
scheduler leaves no partial rows and its orphan is reaped at the next start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from polling import DEADLINE_S, wait_for
from rtax.service.lock import LockHeld, SchedulerLock
from rtax.service.scheduler import Scheduler
from rtax.settings import SubstrateConfig, config
from rtax.store.database import Store
from rtax.substrates import build_substrate
from rtax.substrates.base import Environment
from rtax.substrates.local import LocalSubstrate


def _config(tmp_path: Path, plans: str, extra_substrates: str = "", deadline: str = "1m"):
    file = tmp_path / "rtax.toml"
    file.write_text(f"""
database = "rtax.db"
[scheduler]
deadline = "{deadline}"
[[substrates]]
name = "local"
kind = "local"
{extra_substrates}
{plans}
""")
    return config.load(file)


def _runs(db: Path) -> pd.DataFrame:
    if not db.exists():
        return pd.DataFrame(columns=["substrate", "status"])
    with Store(db, create=False) as store:
        return store.runs.read()


class _Hang(LocalSubstrate):
    """A substrate whose create() hangs until released (a control plane that never answers)."""

    release = threading.Event()

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        self.release.wait(120)
        return super().create(run_id, lifetime_s=lifetime_s)


@pytest.fixture
def factory(tmp_path: Path, attrs_fixture):
    calls: dict[str, int] = {}

    def make(conf: SubstrateConfig, overrides: dict):
        params = {"root": tmp_path / "envs", "template": attrs_fixture.template}
        if conf.kind == "local" and conf.name == "hang":
            return _Hang(name="hang", **params)
        if conf.name == "flaky" and calls.setdefault("flaky", 0) >= 2:  # start-up: check, reap
            raise RuntimeError("control plane unreachable")  # fine at start-up, then gone
        if conf.name == "flaky":
            calls["flaky"] += 1
        if conf.kind == "local":
            return LocalSubstrate(name=conf.name, **params, **overrides)
        return build_substrate(conf, overrides)

    return make


@pytest.fixture
def scheduler_of(attrs_fixture, factory) -> Iterator:
    made: list[Scheduler] = []

    def make(conf) -> Scheduler:
        scheduler = Scheduler(conf, factory=factory, fixture=attrs_fixture)
        made.append(scheduler)
        scheduler.start()
        return scheduler

    yield make
    _Hang.release.set()
    for scheduler in made:
        scheduler.stop(wait=True)
    _Hang.release.clear()


PLAN_T0 = """
[[plans]]
name = "fast"
substrates = ["local"]
tier = "T0"
interval = "1s"
"""


def test_short_interval_records_runs_with_lag(tmp_path: Path, scheduler_of) -> None:
    conf = _config(tmp_path, PLAN_T0)
    scheduler_of(conf)
    wait_for(lambda: len(_runs(conf.database)) >= 3, "3 runs")
    runs = _runs(conf.database)
    assert set(runs["plan"]) == {"fast"} and (runs["status"] == "ok").all()
    scheduled = pd.to_datetime(runs["scheduled_at"], format="ISO8601")
    started = pd.to_datetime(runs["started_at"], format="ISO8601")
    lag = (started - scheduled).dt.total_seconds()
    assert (lag >= 0).all() and (lag < 5).all()
    assert scheduled.is_monotonic_increasing and scheduled.nunique() == len(scheduled)


def test_hanging_substrate_is_cut_and_others_keep_running(tmp_path: Path, scheduler_of) -> None:
    plans = """
[[plans]]
name = "stuck"
substrates = ["hang"]
tier = "T0"
interval = "1h"
[[plans]]
name = "fast"
substrates = ["local"]
tier = "T0"
interval = "1s"
"""
    extra = '[[substrates]]\nname = "hang"\nkind = "local"\n'
    conf = _config(tmp_path, plans, extra, deadline="1s")  # concurrency 1, the default
    assert conf.concurrency == 1
    scheduler_of(conf)

    def cut_and_more() -> bool:
        runs = _runs(conf.database)
        stuck = runs[runs["substrate"] == "hang"]
        after = runs[(runs["substrate"] == "local")]
        return len(stuck) == 1 and len(after) >= 3

    wait_for(cut_and_more, "the hung rollout cut and 3 local runs")
    stuck = _runs(conf.database).query("substrate == 'hang'").iloc[0]
    assert (stuck["status"], stuck["error_class"]) == ("failed", "deadline_exceeded")
    assert 1.0 <= stuck["wall_s"] < 5


def test_a_pooled_substrate_is_filled_at_start_claimed_from_and_emptied_at_stop(
    tmp_path: Path, attrs_fixture, factory
) -> None:
    """docs/configuration.md#warm-pools: the scheduler fills the pool before its first plan
    runs, its rollouts are warm (their time to first command is the claim), the same kind
    without a pool stays cold, and stopping destroys every environment the pool holds."""
    plans = PLAN_T0.replace('substrates = ["local"]', 'substrates = ["local", "warm"]')
    extra = '[[substrates]]\nname = "warm"\nkind = "local"\npool = { size = 2 }\n'
    conf = _config(tmp_path, plans, extra)
    scheduler = Scheduler(conf, factory=factory, fixture=attrs_fixture)
    scheduler.start()
    try:
        (pool,) = scheduler.compose.pools.values()
        assert pool.counts()["ready"] == 2  # filled before the first plan ran
        wait_for(lambda: (_runs(conf.database)["substrate"] == "warm").sum() >= 3, "3 warm")
    finally:
        scheduler.stop(wait=True)
    runs = _runs(conf.database)
    assert (runs["status"] == "ok").all()
    warm, cold = runs[runs["substrate"] == "warm"], runs[runs["substrate"] == "local"]
    assert set(warm["launch_type"]) == {"warm"} and set(cold["launch_type"]) == {"cold"}
    # the claim, then its first command (docs/measurement.md#launch-paths)
    assert list(warm["time_to_first_command_s"]) == pytest.approx(
        list(warm["claim_s"] + warm["ready_s"])
    )
    assert warm["create_s"].isna().all() and cold["claim_s"].isna().all()
    assert pool.counts()["ready"] == 0  # the pool was emptied
    leftovers = LocalSubstrate(name="warm", root=tmp_path / "envs").leftovers()
    assert leftovers == []


def test_a_second_scheduler_refuses(tmp_path: Path, scheduler_of) -> None:
    conf = _config(tmp_path, PLAN_T0)
    scheduler_of(conf)
    with pytest.raises(LockHeld, match="another scheduler"):
        SchedulerLock(conf.database).acquire()
    done = subprocess.run(
        [sys.executable, "-m", "rtax", "schedule", "--config", str(conf.path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("rtax schedule: error: another")


#: The substrate name of the SIGKILL test's docker, which no other test uses.
SIGKILLED = "docker-sigkilled"


def test_sigkill_mid_rollout_leaves_no_partial_rows_and_next_start_reaps(
    tmp_path: Path, runner_image: str
) -> None:
    # A substrate name of its own: a reaper lists only its substrates' leftovers, and this
    # orphan's owner is dead, so any other test's scheduler or `rtax reap` on a "docker" of its
    # own would remove it first on a shared engine (CI: the orphan went, reaped by another).
    plans = f"""
[[plans]]
name = "traj"
substrates = ["{SIGKILLED}"]
tier = "T2"
steps = 50
interval = "1h"
"""
    extra = f'[[substrates]]\nname = "{SIGKILLED}"\nkind = "docker"\n'
    conf = _config(tmp_path, plans, extra)
    env = {**os.environ, "RTAX_LOCAL_ROOT": str(tmp_path / "envs")}
    cmd = [sys.executable, "-m", "rtax", "schedule", "--config", str(conf.path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    from rtax.substrates.docker.substrate import DockerSubstrate

    docker = DockerSubstrate(name=SIGKILLED)
    try:
        # mid-rollout: the container exists and actions are running
        victim = wait_for(
            lambda: [
                lo for lo in docker.leftovers() if lo.owner and lo.owner.endswith(f":{proc.pid}")
            ],
            "a rollout container",
        )[0]
        wait_for(
            lambda: "running" in docker.api.inspect_container(victim.env_id)["State"]["Status"],
            "the container running",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    runs = _runs(conf.database)
    assert runs.empty  # the rollout in progress wrote nothing, not half of itself
    assert victim.env_id in [lo.env_id for lo in docker.leftovers()]  # orphaned

    again = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(
            lambda: victim.env_id not in [lo.env_id for lo in docker.leftovers()],
            "the orphan reaped by the next scheduler",
        )
    finally:
        again.send_signal(signal.SIGTERM)
        _, err = again.communicate(timeout=DEADLINE_S)
    assert f"reaped {SIGKILLED} leftover {victim.env_id}".encode() in err


def test_health_reports_what_is_missing(tmp_path: Path, scheduler_of, capsys) -> None:
    from rtax import cli

    conf = _config(tmp_path, PLAN_T0)
    dead_url = "http://127.0.0.1:9/_stcore/health"  # nothing listens on the discard port
    assert cli.main(["health", "--url", dead_url, "--config", str(conf.path)]) == 1
    err = capsys.readouterr().err
    assert "dashboard" in err and "no scheduler holds the database lock" in err
    scheduler_of(conf)
    assert cli.main(["health", "--url", dead_url, "--config", str(conf.path)]) == 1
    err = capsys.readouterr().err
    assert "dashboard" in err and "scheduler" not in err  # the scheduler part is healthy now


def test_a_rollout_that_cannot_start_is_kept_as_a_failure(tmp_path: Path, scheduler_of) -> None:
    plans = """
[[plans]]
name = "broken"
substrates = ["flaky"]
tier = "T0"
interval = "1h"
"""
    extra = '[[substrates]]\nname = "flaky"\nkind = "local"\n'
    conf = _config(tmp_path, plans, extra)  # the factory fails for "flaky" after start-up
    scheduler_of(conf)
    wait_for(lambda: len(_runs(conf.database)) >= 1, "the failed row")
    run = _runs(conf.database).iloc[0]
    assert (run["status"], run["error_class"], run["plan"]) == ("failed", "setup_error", "broken")
    assert run["fidelity"] == "real"  # a local substrate is real by construction, not by default
    assert "control plane unreachable" in run["error_message"]


def test_daily_budgets_pause_a_substrate(tmp_path: Path, scheduler_of) -> None:
    """Rollout and environment-minute budgets stop probing once used up today; runs from an
    earlier UTC day don't count; an unbudgeted substrate keeps running (the clock here)."""
    from factories import make_record

    budgets = """
[[substrates]]
name = "two-a-day"
kind = "local"
max_rollouts_per_day = 2
[[substrates]]
name = "one-minute-ish"
kind = "local"
max_env_minutes_per_day = 0.000001
"""
    plans = """
[[plans]]
name = "fast"
substrates = ["local", "two-a-day", "one-minute-ish"]
tier = "T0"
interval = "1s"
"""
    conf = _config(tmp_path, plans, extra_substrates=budgets)
    with Store(conf.database) as store:  # yesterday's spending doesn't count today
        for i in range(3):
            store.save_rollout(
                make_record(
                    f"old-{i}", substrate="two-a-day", started_at="2020-01-01T00:00:00+00:00"
                )
            )
    scheduler_of(conf)
    wait_for(lambda: (_runs(conf.database)["substrate"] == "local").sum() >= 4, "4 runs")
    today = _runs(conf.database)
    today = today[~today["run_id"].str.startswith("old-")]
    counts = today["substrate"].value_counts()
    assert counts["two-a-day"] == 2
    assert counts["one-minute-ish"] == 1


def test_budgets_count_rollouts_still_running(tmp_path: Path) -> None:
    """With concurrency > 1 a rollout in flight isn't stored yet; the budget check counts it
    (and the minutes its environment has used so far) so that two plans can't both take the
    last rollout of the day."""
    budgets = """
[[substrates]]
name = "one-a-day"
kind = "local"
max_rollouts_per_day = 1
[[substrates]]
name = "a-minute-a-day"
kind = "local"
max_env_minutes_per_day = 1
"""
    conf = _config(tmp_path, "", extra_substrates=budgets)
    scheduler = Scheduler(conf)
    with Store(conf.database) as store:
        assert scheduler.dispatcher.over_budget(conf.substrates["one-a-day"], store) is None
        scheduler.dispatcher.in_flight["one-a-day"] = [time.monotonic()]
        assert "1 of 1 rollouts" in scheduler.dispatcher.over_budget(
            conf.substrates["one-a-day"], store
        )
        scheduler.dispatcher.in_flight["a-minute-a-day"] = [time.monotonic() - 30]
        assert scheduler.dispatcher.over_budget(conf.substrates["a-minute-a-day"], store) is None
        scheduler.dispatcher.in_flight["a-minute-a-day"] = [time.monotonic() - 90]
        why = scheduler.dispatcher.over_budget(conf.substrates["a-minute-a-day"], store)
        assert why is not None and "environment-minutes" in why


def test_sigterm_during_ready_exits_promptly_and_records_nothing(
    tmp_path: Path, attrs_fixture
) -> None:
    """Cancellation is not a failure: `rtax schedule` stopped while a rollout waits in its
    ready phase (here a shell that refuses every command, as an environment that never accepts
    commands would; the ready timeout is 120 s) exits within 5 s, stores no row (no false
    ready_timeout) and leaves no environment behind."""
    attempts = tmp_path / "attempts"
    refuse = tmp_path / "refuse.sh"
    refuse.write_text(f'#!/bin/sh\necho attempt >> "{attempts}"\nexit 1\n')
    refuse.chmod(0o755)
    envs = tmp_path / "envs"
    file = tmp_path / "rtax.toml"
    file.write_text(
        'database = "rtax.db"\n'
        '[[substrates]]\nname = "stubborn"\nkind = "local"\n'
        f'params = {{ shell = "{refuse}", root = "{envs}", '
        f'template = "{attrs_fixture.template}" }}\n'
        '[[plans]]\nname = "p"\nsubstrates = ["stubborn"]\ntier = "T0"\ninterval = "1h"\n'
    )
    conf = config.load(file)
    env = {**os.environ, "RTAX_FIXTURES_DIR": str(attrs_fixture.root)}
    cmd = [sys.executable, "-m", "rtax", "schedule", "--config", str(file)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # In the ready phase: its environment exists and it has been refused a few times.
        wait_for(
            lambda: attempts.exists() and len(attempts.read_text().split()) >= 3,
            "ready attempts",
        )
        assert list(envs.glob("rtax-*")), "the rollout's environment exists while in ready"
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=DEADLINE_S)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 5.0, f"exited {took:.1f} s after SIGTERM; stderr: {err.decode()[-2000:]}"
    assert proc.returncode == 143, err.decode()[-2000:]  # terminated, cleanly
    assert _runs(conf.database).empty  # no false ready_timeout, no cancelled row
    assert list(envs.glob("rtax-*")) == []  # cleaned up


class _Unreachable(LocalSubstrate):
    """A local substrate whose environments would reach this host at an address it does not
    have (TEST-NET-1), so rtax's git daemon for T2 cannot bind there."""

    host_address = "192.0.2.1"


def test_a_git_daemon_that_cannot_bind_is_a_harness_error_kept_apart(
    tmp_path: Path, attrs_fixture
) -> None:
    from rtax.analysis import stats

    plans = PLAN_T0.replace('interval = "1s"', 'interval = "1h"') + (
        '[[plans]]\nname = "clone"\nsubstrates = ["local"]\ntier = "T2"\ninterval = "1h"\n'
    )
    conf = _config(tmp_path, plans)

    def factory(conf: SubstrateConfig, overrides: dict):
        return _Unreachable(name=conf.name, root=tmp_path / "envs", template=attrs_fixture.template)

    scheduler = Scheduler(conf, factory=factory, fixture=attrs_fixture)
    scheduler.start()
    try:
        wait_for(lambda: len(_runs(conf.database)) >= 2, "the T0 and the T2 rows")
    finally:
        scheduler.stop(wait=True)
    runs = _runs(conf.database)
    t0, t2 = (runs[runs["tier"] == t].iloc[0] for t in ("T0", "T2"))
    assert t0["status"] == "ok"
    assert (t2["status"], t2["error_class"], t2["fidelity"]) == ("failed", "harness_error", "real")
    assert "git daemon on 192.0.2.1" in t2["error_message"]
    # Kept, shown apart, and the substrate's success rate is its 1 of 1 attempts, not 1 of 2.
    assert stats.success_rate(runs) == 1.0
    by_tier = stats.latency_table(runs, "wall_s").set_index("tier")
    assert (by_tier.loc["T2", "runs"], by_tier.loc["T2", "harness_errors"]) == (0, 1)


def test_a_record_the_database_cannot_take_is_spooled_then_written(tmp_path: Path) -> None:
    from factories import make_record

    conf = _config(tmp_path, "")
    scheduler = Scheduler(conf)
    conf.database.mkdir()  # the database is unavailable (here: a folder stands in its place)
    scheduler.save(make_record("first"))
    assert scheduler.spool.exists() and not conf.database.is_file()  # nothing written, kept
    conf.database.rmdir()
    scheduler.save(make_record("second"))  # the database is back: the spool goes first
    assert not scheduler.spool.exists()
    assert sorted(_runs(conf.database)["run_id"]) == ["first", "second"]


def test_a_row_that_never_started_never_defaults_to_real(tmp_path: Path) -> None:
    from rtax.substrates import configured_fidelity

    def entry(kind: str, **fields) -> SubstrateConfig:
        return SubstrateConfig(name=kind, kind=kind, params=fields.pop("params", {}), **fields)

    assert configured_fidelity(entry("local")) == "real"  # real by construction
    assert configured_fidelity(entry("ec2")) == "unknown"  # nobody saw its endpoint answer
    assert configured_fidelity(entry("ec2", emulate=True)) == "emulated"
    assert configured_fidelity(entry("daytona", params={"fidelity": "modelled"})) == "modelled"


def test_start_replays_what_a_probe_spooled_in_either_place(
    tmp_path: Path, scheduler_of, monkeypatch
) -> None:
    from factories import make_record
    from rtax.store.spool import Spool

    monkeypatch.setenv("RTAX_SPOOL_DIR", str(tmp_path / "state"))
    conf = _config(tmp_path, "")
    Store(conf.database).close()
    spool = Spool(conf.database, lambda: Store(conf.database))
    for run_id, path in (("beside", spool.path), ("away", spool.fallback)):
        record = make_record(run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"run": record.run, "actions": record.actions}) + "\n")
    scheduler_of(conf)
    assert sorted(_runs(conf.database)["run_id"]) == ["away", "beside"]
    assert not spool.path.exists() and not spool.fallback.exists()


def test_detection_runs_beside_probing_and_alerts_once_per_incident(
    tmp_path: Path, scheduler_of
) -> None:
    """Every local rollout breaches a 1 ms p95 rule: one incident, one alert, while probing
    goes on; a receiver that hangs on the alert does not stop rollouts being stored."""
    from tests.test_alerts import Receiver

    receiver = Receiver()
    receiver.hold = threading.Event()
    try:
        conf = _config(
            tmp_path,
            PLAN_T0
            + f"""
[detection]
interval = "1s"
[alerts]
webhook = "{receiver.url}"
timeout = "20s"
[[alerts.rules]]
name = "slow"
metric = "time_to_first_command"
p95_above = "1ms"
samples = 1
""",
        )
        scheduler = scheduler_of(conf)
        wait_for(lambda: receiver.requests == 1, "the alert posted")
        stored = len(_runs(conf.database))
        wait_for(lambda: len(_runs(conf.database)) >= stored + 2, "rollouts while it hangs")
        receiver.hold.set()
        wait_for(lambda: receiver.bodies, "the alert delivered")
        with Store(conf.database, create=False) as store:
            (incident,) = store.incidents.read().to_dict("records")
        assert incident["state"] == "open" and incident["rule"] == "slow"
        passes = len(_runs(conf.database))
        wait_for(lambda: len(_runs(conf.database)) >= passes + 2, "more rollouts")
        assert scheduler.notifier is not None
        assert len(receiver.bodies) == 1 and receiver.requests == 1
    finally:
        receiver.close()


def test_the_scheduler_settles_allocators_once_and_trims_after_each_detection_pass(
    tmp_path: Path, scheduler_of, monkeypatch
) -> None:
    """The soak's flat memory rests on these two calls (docs/soak.md#memory): one settle at
    start, before any worker thread allocates, and a trim after every detection pass, even one
    that fails."""
    from rtax.service import memory

    calls = {"settle": 0, "trim": 0}

    def settle() -> list[str]:
        calls["settle"] += 1
        return []

    def trim() -> bool:
        calls["trim"] += 1
        return False

    monkeypatch.setattr(memory, "settle", settle)
    monkeypatch.setattr(memory, "trim", trim)
    conf = _config(tmp_path, PLAN_T0 + '\n[detection]\ninterval = "1s"\n')
    scheduler = scheduler_of(conf)
    wait_for(lambda: calls["trim"] >= 2, "two detection passes trimmed")
    assert calls["settle"] == 1
    broken = calls["trim"]
    monkeypatch.setattr(
        "rtax.service.detection.run", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("x"))
    )
    with pytest.raises(RuntimeError):
        scheduler.run_detection()
    assert calls["trim"] > broken and calls["settle"] == 1
