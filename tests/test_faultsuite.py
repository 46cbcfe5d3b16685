"""The fault suite's pure parts (docs/faults.md): its counting, its table, its verdict, its
schedule and its configuration. `make faults` runs the suite itself; these make sure that a suite
which would report zero leaks, zero lost rows or a live scheduler when there are none fails here.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from factories import make_record
from polling import wait_for
from rtax.core.record import RolloutRecord
from rtax.emulation.faults import Fault
from rtax.faultsuite import scenario, suite, tally
from rtax.faultsuite.inject import kind_of
from rtax.faultsuite.watch import LogFollower, search_files
from rtax.service.dispatch import _announce
from rtax.settings import config


def clean() -> tally.Outcome:
    """A run in which everything held: every fault injected, nothing lost or leaked."""
    return tally.Outcome(
        finished={"a1": "docker", "b2": "local", "c3": "kubernetes"},
        rows={"a1": (10, 10), "b2": (1, 1), "c3": (1, 1)},
        faults=Counter({kind: 2 for kind in tally.FAULT_KINDS}),
        leaked={"docker": 0, "local dirs": 0},
        scheduler_alive=True,
        target=3,
    )


def test_a_clean_run_passes_with_zeros() -> None:
    outcome = clean()
    assert tally.problems(outcome) == []
    assert tally.exit_code(outcome) == 0
    text = tally.table(outcome)
    assert "PASS" in text
    assert "scheduler alive" in text and "yes" in text


def test_one_leaked_environment_fails_and_is_shown() -> None:
    outcome = clean()
    outcome.leaked["kubernetes"] = 1
    assert tally.exit_code(outcome) == 1
    line = next(row for row in tally.table(outcome).splitlines() if "leaked" in row)
    assert line.split()[-2:] == ["kubernetes", "1"]


def test_a_finished_rollout_without_a_row_is_lost() -> None:
    outcome = clean()
    outcome.finished["d4"] = "ec2"  # the log says it finished; the database has no row
    outcome.target = 4
    assert tally.lost(outcome) == ["d4"]
    assert tally.exit_code(outcome) == 1
    assert "1 rows lost" in tally.table(outcome)


def test_a_row_with_fewer_stored_actions_than_done_is_partial() -> None:
    outcome = clean()
    outcome.rows["a1"] = (10, 7)
    assert tally.partial(outcome) == ["a1"]
    assert tally.exit_code(outcome) == 1


def test_more_stored_actions_than_done_is_not_partial() -> None:
    """A run that failed at its 4th action stored 4 rows: 3 done plus the failed one."""
    outcome = clean()
    outcome.rows["a1"] = (3, 4)
    assert tally.partial(outcome) == []


@pytest.mark.parametrize(
    "change",
    [
        lambda o: setattr(o, "locked_errors", 1),
        lambda o: setattr(o, "scheduler_alive", False),
        lambda o: o.secrets.update({"rtax.db-wal": 1}),
        lambda o: o.faults.pop("disk full"),  # a fault never injected proves nothing
        lambda o: setattr(o, "target", 200),  # fewer rollouts than the size asks for
    ],
)
def test_each_must_be_zero_row_fails_the_run(change) -> None:
    outcome = clean()
    change(outcome)
    assert tally.exit_code(outcome) == 1
    assert "FAIL" in tally.table(outcome)


def test_the_informational_rows_do_not_fail_the_run() -> None:
    outcome = clean()
    outcome.reaped, outcome.spooled = 3, 2
    assert tally.exit_code(outcome) == 0


def test_the_scheduler_log_line_is_what_the_suite_counts(caplog) -> None:
    """`rtax schedule` announces every measured rollout before storing it; the suite's parser
    reads exactly that line (a format change must fail here, not count zero rollouts)."""
    record = RolloutRecord(
        run={
            "run_id": "0123abcd",
            "substrate": "docker-gvisor",
            "status": "failed",
            "error_class": "deadline_exceeded",
        }
    )
    with caplog.at_level(logging.INFO, logger="rtax.service.dispatch"):
        _announce(record)
    assert tally.finished_runs(caplog.messages) == {"0123abcd": "docker-gvisor"}
    assert tally.finished_runs(["plan x: docker T0 ok in 0.5 s"]) == {}


def test_the_log_follower_waits_for_a_line_to_end(tmp_path: Path) -> None:
    log = tmp_path / "scheduler-1.log"
    follower = LogFollower()
    follower.add(log)
    log.write_text("x INFO rollout finished: local ok [run aa]\nx INFO rollout finished: lo")
    follower.poll()
    assert follower.finished == {"aa": "local"}
    with log.open("a") as out:
        out.write("cal ok [run bb]\nx ERROR sqlite3.OperationalError: database is locked\n")
    follower.poll()
    assert follower.finished == {"aa": "local", "bb": "local"}
    assert follower.locked == 1


def test_search_files_counts_every_planted_secret(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "scheduler-1.log").write_text("token s3cret-a and s3cret-a\n")
    (tmp_path / "runs.csv").write_bytes(b"\x00s3cret-b\x00")
    (tmp_path / "clean.log").write_text("nothing here\n")
    found = search_files([tmp_path / "logs", tmp_path / "runs.csv"], ["s3cret-a", "s3cret-b"])
    assert found == {"scheduler-1.log": 2, "runs.csv": 1}


def _fault(failing: bool, status: int | None = None, code: str | None = None, op: str = "create"):
    return Fault(op, failing, status, code, "", None, 0.0, 1)


def test_emulation_faults_are_counted_by_kind() -> None:
    assert kind_of(_fault(False)) == "lost create response"
    assert kind_of(_fault(False, op="exec")) == "hung action"
    assert kind_of(_fault(True, 429)) == "429 storm"
    assert kind_of(_fault(True, 503, "RequestLimitExceeded")) == "429 storm"
    assert kind_of(_fault(True, 500)) == "500 storm"
    assert kind_of(_fault(True, 500, "InsufficientInstanceCapacity")) == "create failure"
    assert kind_of(_fault(True, 403)) == "create failure"


@pytest.mark.parametrize("size", sorted(scenario.SIZES))
def test_every_size_injects_every_fault_kind_within_its_rollouts(size: str) -> None:
    chosen = scenario.SIZES[size]
    plan = scenario.schedule(chosen)
    at = [n for n, _ in plan]
    assert at == sorted(at) and at[0] > 0 and at[-1] < chosen.target
    # every kind but the readers (which poll throughout) is in the plan
    assert {kind for _, kind in plan} == set(tally.FAULT_KINDS) - {"dashboard reads"}
    assert scenario.SIZES["full"].target >= 200


def test_the_generated_configuration_passes_rtax_config_check(tmp_path: Path) -> None:
    clouds = {
        "kubernetes": {
            "host": "http://127.0.0.1:1",
            "image": "rtax-runner:latest",
            "fidelity": "emulated",
            "host_address": "10.0.0.1",
        },
        "ec2": {
            "endpoint": "http://127.0.0.1:2",
            "region": "us-east-1",
            "ami": "ami-1",
            "instance_profile": "p",
            "host_address": "10.0.0.1",
            "fidelity": "emulated",
        },
        "daytona": {
            "api_url": "http://127.0.0.1:3/api",
            "api_key": "never-written",
            "target": "emulated",
            "snapshot": "rtax-runner",
            "fidelity": "emulated",
            "host_address": "10.0.0.1",
        },
    }
    path = tmp_path / "faults.toml"
    path.write_text(scenario.config_text(tmp_path / "db" / "rtax.db", clouds))
    assert "never-written" not in path.read_text()  # credentials only by *_env
    conf = config.load(path)
    assert set(conf.substrates) == {*scenario.CONTAINERS, *scenario.CLOUDS}
    assert conf.substrates["kubernetes"].params["token_env"] == scenario.KUBE_TOKEN_ENV
    assert conf.substrates["daytona"].params["api_key_env"] == "DAYTONA_API_KEY"
    assert conf.database == tmp_path / "db" / "rtax.db"


def test_the_planted_secrets_are_fresh_and_cover_every_credential() -> None:
    one, two = scenario.canaries(), scenario.canaries()
    assert set(scenario.SECRET_VARS) <= set(one)
    assert all(one[k] != two[k] for k in scenario.SECRET_VARS)


def test_rows_are_read_from_a_real_database_with_never_started_runs(tmp_path: Path) -> None:
    """A run that never started stores no count of actions done (NULL): it is 0 done, not a
    crash of the suite's last step; fewer stored actions than done is partial."""
    from rtax.faultsuite.suite import rows_of
    from rtax.store.database import Store

    database = tmp_path / "rtax.db"
    with Store(database) as store:
        store.save_rollout(make_record("full", ("ready", "action", "action"), n_actions_done=2))
        store.save_rollout(make_record("short", ("ready", "action"), n_actions_done=3))
        store.save_rollout(make_record("never", ("ready",), n_actions_done=None, status="failed"))
    Path(f"{database}.spool.jsonl").write_text('{"run": 1}\n{"run": 2}\n')
    outcome = tally.Outcome(finished={"full": "local", "short": "local", "gone": "docker"})
    rows_of(database, outcome)
    assert outcome.rows == {"full": (2, 2), "short": (3, 1), "never": (0, 0)}
    assert tally.partial(outcome) == ["short"]
    assert tally.lost(outcome) == ["gone"]
    assert outcome.spooled == 2
    second = tmp_path / "spool"  # where records go when the database's own disk is full
    second.mkdir()
    (second / "rtax.db-0123456789ab.spool.jsonl").write_text('{"run": 3}\n')
    rows_of(database, outcome, second)
    assert outcome.spooled == 3


def test_a_substrate_whose_leftovers_could_not_be_listed_fails_the_run() -> None:
    """A leak count that could not be taken is unknown, not 0: the verdict says so."""
    outcome = tally.Outcome(leaked={"ec2": 0, "docker": 0}, unchecked=["ec2"])
    assert "leftovers of ec2 could not be listed" in tally.problems(outcome)
    row = next(r for r in tally.table(outcome).splitlines() if "substrates not checked" in r)
    assert row.split() == ["substrates", "not", "checked", "1", "ec2"]


def test_the_environment_search_finds_a_secret_in_a_running_local_command(tmp_path: Path) -> None:
    """A command under the local root whose environment holds a planted secret is found; one
    with a clean environment is not (real processes, read through /proc)."""
    import subprocess
    import threading

    from rtax.faultsuite.watch import EnvironmentSearch

    root = tmp_path / "local"
    (root / "env-a").mkdir(parents=True)
    (root / "env-b").mkdir()
    # alive well past the deadline (killed below), so that a slow search still finds them
    leaky = subprocess.Popen(["sleep", "600"], cwd=root / "env-a", env={"TOKEN": "s3cret-x"})
    clean = subprocess.Popen(["sleep", "600"], cwd=root / "env-b", env={"PATH": "/usr/bin"})
    try:
        search = EnvironmentSearch(root, None, ["s3cret-x"], threading.Event())  # type: ignore[arg-type]
        # both must have exec'd (a child between fork and exec is skipped as its parent's)
        for proc in (leaky, clean):
            wait_for(
                lambda p=proc: (
                    Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"
                ),
                f"the test's command {proc.pid} to exec sleep",
                interval_s=0.01,
            )
        search._local()
        assert search.local_hits == {leaky.pid}
    finally:
        for proc in (leaky, clean):
            proc.kill()
            proc.wait()


def _process(tmp_path: Path, code: str) -> tuple[suite.SchedulerProcess, Path]:
    """A SchedulerProcess whose current start is `code` run by Python, logging where
    `rtax schedule`'s first start would."""
    scheduler = suite.SchedulerProcess(tmp_path / "x.toml", tmp_path, {}, LogFollower())
    scheduler.starts = 1
    log = tmp_path / "scheduler-1.log"
    scheduler.proc = subprocess.Popen([sys.executable, "-c", code, str(log)])
    return scheduler, log


def test_a_restart_is_waited_for_until_it_serves(tmp_path: Path) -> None:
    """The SIGKILL fault ends when the restarted scheduler serves, so the next fault (the full
    disk) meets a running scheduler, not one mid-start (CI's exit-2 loop, issue 25)."""
    code = (
        "import sys, time\n"
        "time.sleep(1)\n"
        "open(sys.argv[1], 'w').write('2026-12-07 15:16:12,150 INFO scheduler started: 4 plans, "
        "database /tmp/x.db\\n')\n"
        "time.sleep(120)\n"
    )
    scheduler, log = _process(tmp_path, code)
    try:
        assert scheduler._serving_within(log, 60.0)
        assert scheduler.alive()
    finally:
        scheduler.proc.kill()
        scheduler.proc.wait()


def test_a_restart_that_exits_before_serving_ends_the_wait(tmp_path: Path) -> None:
    code = "import sys\nopen(sys.argv[1], 'w').write('cannot start: OSError\\n')\nsys.exit(2)\n"
    scheduler, log = _process(tmp_path, code)
    assert not scheduler._serving_within(log, 120.0)  # ends at the exit, not the deadline
    assert scheduler.proc.returncode == 2


def test_the_serving_line_is_what_the_scheduler_logs() -> None:
    """`rtax schedule`'s log format and the scheduler's message, as `SERVING` expects them."""
    import inspect

    from rtax.cli import commands
    from rtax.service import scheduler

    assert '"%(asctime)s %(levelname)s %(message)s"' in inspect.getsource(commands.cmd_schedule)
    said = scheduler.Scheduler.start
    assert f'"{suite.SERVING.split(" INFO ", 1)[1]}' in inspect.getsource(said)
