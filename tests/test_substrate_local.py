"""The local substrate: the contract suite, plus what only a local process tree can show."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from contract import SubstrateContract, assert_phases_add_up
from polling import DEADLINE_S, wait_for
from rtax.assets.attrs import Fixture
from rtax.core import workloads
from rtax.core.options import RolloutOptions
from rtax.core.workloads import Action, RepoSource, Workload
from rtax.rollouts.rollout import run_rollout
from rtax.store.database import Store
from rtax.substrates import get_substrate
from rtax.substrates.base import CommandResult, Environment, Substrate
from rtax.substrates.local import LocalSubstrate


class TestLocalContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, local: LocalSubstrate) -> LocalSubstrate:
        return local


def _alive(marker: str) -> bool:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return out.returncode == 0


def test_registry_builds_local(tmp_path: Path) -> None:
    sub = get_substrate("local", root=tmp_path)
    assert isinstance(sub, LocalSubstrate) and sub.name == "local" and sub.fidelity == "real"


def test_leftovers_are_per_name_and_destroy_removes_only_rtax_environments(
    tmp_path: Path,
) -> None:
    """`rtax reap` removes a leftover with `destroy`: it must refuse a directory that is not an
    rtax environment under its root, and each name lists only its own (and, from rtax
    before the kit's label vocabulary, label files without a name)."""
    import json

    from rtax.core.failures import CleanupFailed
    from rtax.substrates.base import Leftover

    root = tmp_path / "envs"
    mine, other = LocalSubstrate(root=root), LocalSubstrate(name="local-2", root=root)
    env = mine.create("per-name")
    old = root / "rtax-old"
    old.mkdir()
    (old / ".rtax-env.json").write_text(
        json.dumps({"label": "rtax", "run_id": "old", "created_at": None, "owner": "h:1"})
    )
    assert sorted(lo.run_id for lo in mine.leftovers()) == ["old", "per-name"]
    assert [lo.run_id for lo in other.leftovers()] == ["old"]
    stranger = tmp_path / "not-ours"
    stranger.mkdir()
    for path in (stranger, root / "unlabelled"):
        path.mkdir(exist_ok=True)
        with pytest.raises(CleanupFailed, match="not an rtax environment"):
            mine.destroy(Leftover(env_id=str(path), run_id=None), 10)
        assert path.is_dir()
    (found,) = [lo for lo in mine.leftovers() if lo.run_id == "per-name"]
    mine.destroy(found, 10)
    assert not Path(env.env_id).exists()
    mine.destroy(found, 10)  # already gone: nothing to do


def test_a_folder_whose_label_was_lost_is_reaped_once_it_is_old(tmp_path: Path) -> None:
    """An rtax killed between making a folder and labelling it, or half-way through removing
    one, leaves ``rtax-<run id>`` with no label (the full fault suite's "local dirs 1"). Once
    untouched for a minute it is a leftover like any other and the reaper removes it; a fresh
    one (a create in progress) and a folder not named as rtax names them are left alone."""
    from datetime import UTC, datetime

    from rtax.substrates import local as local_module
    from rtax.substrates.reaper import reap

    root = tmp_path / "envs"
    sub = LocalSubstrate(root=root)
    env = sub.create("lost-label")
    (Path(env.env_id) / local_module.LABEL_FILE).unlink()
    fresh, stranger = root / "rtax-being-made", root / "someone-elses"
    fresh.mkdir()
    stranger.mkdir()
    assert sub.leftovers() == []  # every one was touched just now
    old = datetime.now(UTC).timestamp() - 2 * local_module.UNLABELLED_AFTER_S
    for path in (Path(env.env_id), stranger):
        os.utime(path, (old, old))
    (found,) = sub.leftovers()
    assert (found.run_id, found.owner) == ("lost-label", None) and "no label" in found.detail
    # the reaper as the scheduler and `rtax reap` run it: no --older-than, and no owner to
    # ask, so it is the expiry the folder's age gives it that makes it an orphan
    removed = reap([sub])
    assert [o.leftover.run_id for o in removed] == ["lost-label"] and not removed[0].error
    assert not Path(env.env_id).exists() and fresh.is_dir() and stranger.is_dir()


def test_a_removal_stopped_half_way_keeps_the_label_for_the_reaper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The label goes last: whatever stops a removal half-way (here a failing sub-folder
    removal), the folder still says whose it is, and the next removal finishes it."""
    from rtax.core.failures import CleanupFailed
    from rtax.substrates import local as local_module

    template = tmp_path / "template"
    (template / "sub").mkdir(parents=True)
    (template / "sub" / "file").write_text("x")
    sub = LocalSubstrate(root=tmp_path / "envs", template=template)
    env = sub.create("half-removed")

    def stopped(path: object, *args: object, **kwargs: object) -> None:
        raise OSError("stopped half-way")

    with monkeypatch.context() as patch:
        patch.setattr(local_module.shutil, "rmtree", stopped)
        with pytest.raises(CleanupFailed, match="stopped half-way"):
            sub.destroy(env, 10)
    assert (Path(env.env_id) / local_module.LABEL_FILE).is_file()
    (found,) = sub.leftovers()
    sub.destroy(found, 10)
    assert not Path(env.env_id).exists()


def test_timeout_kills_the_whole_process_group(local: LocalSubstrate) -> None:
    marker = "314.159"  # a sleep argument no other process uses, outliving the deadline
    hang = Workload(
        "T0",
        0,
        0,
        actions=(Action("exec", f"sleep {marker} & sleep {marker}; wait", timeout_s=0.3),),
    )
    record = run_rollout(local, hang)
    assert record.run["error_class"] == "action_timeout"
    assert not _alive(f"sleep {marker}")


def test_destroy_kills_what_a_command_left_behind_and_never_a_reused_group(
    tmp_path: Path,
) -> None:
    """A command's process group id is only a number once the command exits: the kernel may
    give it to an unrelated process. Simulated here by a foreign `sleep` in its own session
    whose group id stands where an exited command's was; destroy must spare it, and still kill
    the background processes commands left, in their group or in a session of their own."""
    sub = LocalSubstrate(root=tmp_path / "envs", toolchain=tmp_path)  # no toolchain needed
    env = sub.create("reuse")
    # the sleeps outlive the deadline (a slow test still finds them running), not much more
    foreign = subprocess.Popen(["sleep", "271.828"], start_new_session=True)
    try:
        assert sub.run(env, "true", 10).exit_code == 0  # a group that was used and exited
        left = sub.run(env, "sleep 271.829 >/dev/null 2>&1 &", 10)
        escaped = sub.run(env, "setsid sleep 271.830 >/dev/null 2>&1 &", 10)
        assert left.exit_code == escaped.exit_code == 0
        wait_for(
            lambda: _alive("sleep 271.829") and _alive("sleep 271.830"),
            "the background sleeps to start",
        )
        # as if the kernel had reused an exited command's group id for the foreign process
        env.handle.setdefault("groups", set()).add(os.getpgid(foreign.pid))
        sub.destroy(env, 10)
        assert foreign.poll() is None, "destroy killed a process that is not the environment's"
        assert not _alive("sleep 271.829") and not _alive("sleep 271.830")
        assert not Path(env.env_id).exists()
    finally:
        foreign.kill()
        foreign.wait()


def test_clone_by_path(local: LocalSubstrate, attrs_fixture: Fixture) -> None:
    source = RepoSource(
        str(attrs_fixture.bare_repo),
        attrs_fixture.buggy_commit,
        attrs_fixture.fix_patch,
        attrs_fixture.failing_test,
    )
    record = run_rollout(local, workloads.build("T2", source=source))
    assert record.ok, record.run
    assert_phases_add_up(record)


def test_same_seed_same_trajectory_end_to_end(
    local: LocalSubstrate, repo_source: RepoSource, store: Store
) -> None:
    runs = []
    for seed in (5, 5, 6):
        record = run_rollout(local, workloads.build("T2", steps=10, seed=seed, source=repo_source))
        assert record.ok, record.run
        store.save_rollout(record)
        runs.append(record.run["run_id"])
    commands = [list(store.runs.actions(run_id=r, phase="action")["command"]) for r in runs]
    assert commands[0] == commands[1]
    assert commands[0] != commands[2]


class _InterruptAfter:
    """Wraps a substrate and raises KeyboardInterrupt on the n-th command, like a Ctrl-C."""

    def __init__(self, inner: Substrate, n: int) -> None:
        self.inner, self.n, self.calls = inner, n, 0
        self.name, self.kind, self.fidelity = inner.name, inner.kind, inner.fidelity

    def __getattr__(self, attr: str):  # create, wait_running, destroy, leftovers, describe
        return getattr(self.inner, attr)

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        self.calls += 1
        if self.calls == self.n:
            raise KeyboardInterrupt
        return self.inner.run(env, command, timeout_s)


def test_interrupted_rollout_is_cleaned_up_and_not_returned(
    local: LocalSubstrate, repo_source: RepoSource
) -> None:
    wrapped = _InterruptAfter(local, n=6)
    with pytest.raises(KeyboardInterrupt):
        run_rollout(wrapped, workloads.build("T2", steps=10, source=repo_source))
    assert local.leftovers() == []


def _wait_for_runs(db: Path, n: int, proc: subprocess.Popen) -> None:
    def stored() -> bool:
        assert proc.poll() is None, proc.communicate()
        if not db.exists():
            return False
        try:
            with sqlite3.connect(db) as conn:
                return conn.execute("SELECT count(*) FROM runs").fetchone()[0] >= n
        except sqlite3.OperationalError:
            return False  # schema not there yet

    wait_for(stored, f"{n} runs in {db}")


def _complete(db: Path) -> None:
    """Every stored run has exactly the action rows it says it ran: no partial rollouts."""
    with Store(db, create=False) as store:
        runs = store.runs.read()
        actions = store.runs.actions(phase="action")
    assert len(runs) >= 1
    for run in runs.itertuples():
        assert (actions["run_id"] == run.run_id).sum() == run.n_actions_done == run.n_actions


def _daemons(root: Path) -> dict[int, int]:
    """Live (not zombie) git-daemons serving `root`: pid -> parent pid."""
    ps = ["ps", "-ww", "-eo", "pid,ppid,stat,args"]  # -ww: full lines, never cut at 80 columns
    out = subprocess.run(ps, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines()[1:]:
        pid, ppid, stat, args = line.split(None, 3)
        if "git-daemon" in args and f"--base-path={root}" in args and not stat.startswith("Z"):
            found[int(pid)] = int(ppid)
    return found


def _new_daemons(root: Path, before: dict[int, int]) -> dict[int, int]:
    """Daemons that weren't there before and aren't this test process's own (or their
    per-connection children): whatever the probe started and left, wherever it was
    reparented to."""
    return {
        pid: ppid
        for pid, ppid in _daemons(root).items()
        if pid not in before and ppid != os.getpid() and ppid not in before
    }


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"]
)
def test_cli_killed_mid_rollout_leaves_no_partial_rows(
    tmp_path: Path, attrs_fixture: Fixture, sig: signal.Signals
) -> None:
    db, envs = tmp_path / "x.db", tmp_path / "envs"
    env = {**os.environ, "RTAX_LOCAL_ROOT": str(envs)}
    cmd = [
        sys.executable,
        "-m",
        "rtax",
        "probe",
        "--tier",
        "T2",
        "--steps",
        "10",
        "--repeat",
        "50",
        "--db",
        str(db),
        "--quiet",
    ]
    before = _daemons(attrs_fixture.root)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for_runs(db, 1, proc)
        assert _new_daemons(attrs_fixture.root, before)  # the probe's server, seen alive
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    _complete(db)
    # the git daemon that served T2 dies with the probe, whatever killed it
    wait_for(
        lambda: not _new_daemons(attrs_fixture.root, before),
        lambda: f"the git daemon to die with the probe: {_new_daemons(attrs_fixture.root, before)}",
    )
    if sig != signal.SIGKILL:
        assert proc.returncode == (130 if sig == signal.SIGINT else 143), err
        assert b"Traceback" not in err
        # the rollout in progress was cleaned up; SIGKILL leaves it for the reaper
        assert LocalSubstrate(root=envs).leftovers() == []


class _SlowToAccept(LocalSubstrate):
    """Refuses its first commands, as a starting environment does (an agent not online yet)."""

    def __init__(self, refusals: int, **kw) -> None:
        super().__init__(**kw)
        self.refusals = refusals

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        if self.refusals > 0:
            self.refusals -= 1
            from rtax.core.failures import ExecError

            raise ExecError("not accepting commands yet")
        return super().run(env, command, timeout_s)


def test_ready_is_the_whole_wait_back_off_included(tmp_path: Path, attrs_fixture) -> None:
    """The back-off between refused ready attempts is part of the ready phase (it is what the
    phase measures), never the harness's overhead; every attempt is still its own row."""
    sub = _SlowToAccept(4, root=tmp_path / "envs", template=attrs_fixture.template)
    record = run_rollout(sub, workloads.build("T0"))
    assert record.ok, record.run
    assert_phases_add_up(record)  # overhead stays within 1 ms + 1% of the wall time
    attempts = [a for a in record.actions if a["phase"] == "ready"]
    assert [a["ok"] for a in attempts] == [0, 0, 0, 0, 1]
    # four fixed pauses between the five attempts (docs/measurement.md#resolution), all inside
    # the phase
    pauses = 4 * RolloutOptions().ready_interval_s
    assert record.run["ready_s"] >= pauses + sum(a["latency_s"] for a in attempts)
