"""Nothing leaks: every environment a rollout makes carries its expiry, the reaper removes
expired ones whoever owns them (and never one a live rollout may still use), the scheduler
reaps on start and every few minutes, and a create that fails after its request was sent leaves
nothing behind (docs/substrates/docker.md#reaper, docs/adding-a-substrate.md#leftovers).

The local substrate is the real part for the reaper's rules (its label file is its labels);
Docker's create path runs against the real engine. The clouds' create paths are tested against
their emulations in their own files (an ``accepted`` fault: the work done, then a 500)."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from polling import wait_for
from rtax.core import workloads
from rtax.core.failures import CreateFailed
from rtax.core.options import RolloutOptions
from rtax.rollouts.rollout import run_rollout
from rtax.service.scheduler import Scheduler
from rtax.settings import config
from rtax.substrates import kit, reaper
from rtax.substrates.base import Environment, Leftover
from rtax.substrates.local import LABEL_FILE, LocalSubstrate

# -- the expiry in the labels -------------------------------------------------------------------


def test_labels_carry_an_expiry_from_the_lifetime() -> None:
    made = kit.labels("run-1", "local", lifetime_s=600)
    created = datetime.fromisoformat(made[kit.CREATED_AT])
    expires = datetime.fromisoformat(made[kit.EXPIRES_AT])
    assert (expires - created).total_seconds() == pytest.approx(600 + kit.EXPIRY_GRACE_S)
    assert kit.leftover("e", made).expires_at == made[kit.EXPIRES_AT]
    assert kit.EXPIRES_AT not in kit.labels("run-1", "local")  # no lifetime: none claimed


class _Watched(LocalSubstrate):
    """Local, remembering the label file each environment had while its rollout ran."""

    seen: list[dict[str, str]]

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        self.seen.append(json.loads((Path(env.env_id) / LABEL_FILE).read_text()))
        super().wait_running(env, timeout_s)


def test_a_rollouts_environment_expires_after_its_deadline_and_cleanup(
    tmp_path: Path, attrs_fixture: Any
) -> None:
    sub = _Watched(root=tmp_path / "envs", template=attrs_fixture.template)
    sub.seen = []
    options = RolloutOptions(deadline_s=90, cleanup_timeout_s=30)
    record = run_rollout(sub, workloads.build("T0"), options=options)
    assert record.run["status"] == "ok", record.run["error_message"]
    (label,) = sub.seen
    lived = datetime.fromisoformat(label[kit.EXPIRES_AT]) - datetime.fromisoformat(
        label[kit.CREATED_AT]
    )
    assert lived.total_seconds() == pytest.approx(90 + 30 + kit.EXPIRY_GRACE_S)
    assert sub.leftovers() == []


# -- the reaper's rules -------------------------------------------------------------------------


def _plant(sub: LocalSubstrate, run_id: str, **marks: str | None) -> Leftover:
    """An environment of `sub`, its label file then changed by `marks` (None: removed)."""
    env = sub.create(run_id, lifetime_s=60)
    path = Path(env.env_id) / LABEL_FILE
    label = json.loads(path.read_text())
    for key, value in marks.items():
        if value is None:
            label.pop(key, None)
        else:
            label[key] = value
    path.write_text(json.dumps(label))
    return next(lo for lo in sub.leftovers() if lo.run_id == run_id)


def _iso(delta_s: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_s)).isoformat()


def test_an_expired_leftover_is_reaped_though_its_owner_lives(local: LocalSubstrate) -> None:
    """This process is alive (a scheduler that runs for months): its expired leftover goes,
    its environment within expiry (a rollout that may still be using it) stays."""
    expired = _plant(local, "expired", **{kit.EXPIRES_AT: _iso(-1)})
    live = _plant(local, "live")
    assert expired.owner == live.owner == kit.owner()
    reaped = reaper.reap([local])
    assert [(o.leftover.run_id, o.expired) for o in reaped] == [("expired", True)]
    assert "expired" in reaped[0].reason
    assert [lo.run_id for lo in local.leftovers()] == ["live"]


def test_an_expired_leftover_of_another_host_is_reaped(local: LocalSubstrate) -> None:
    """After a restart in the app container the hostname differs: no --older-than needed."""
    _plant(local, "old-host", **{kit.OWNER: "gone-container:1", kit.EXPIRES_AT: _iso(-1)})
    _plant(local, "other-live", **{kit.OWNER: "busy-host:1"})
    assert [o.leftover.run_id for o in reaper.reap([local])] == ["old-host"]
    assert [lo.run_id for lo in local.leftovers()] == ["other-live"]


def test_the_reaper_judges_expiry_at_the_time_asked(local: LocalSubstrate) -> None:
    _plant(local, "later")
    assert reaper.reap([local], dry_run=True) == []
    later = datetime.now(UTC) + timedelta(seconds=60 + kit.EXPIRY_GRACE_S + 1)
    assert [o.leftover.run_id for o in reaper.reap([local], now=later)] == ["later"]
    assert local.leftovers() == []


def test_a_leftover_without_an_expiry_label_gets_the_legacy_lifetime(
    local: LocalSubstrate,
) -> None:
    """Made before expiries were labelled: young ones of a live or foreign owner are spared,
    ones older than `LEGACY_LIFETIME_S` go whoever owns them."""
    _plant(local, "legacy-young", **{kit.EXPIRES_AT: None, kit.OWNER: "elsewhere:1"})
    _plant(
        local,
        "legacy-old",
        **{kit.EXPIRES_AT: None, kit.CREATED_AT: _iso(-reaper.LEGACY_LIFETIME_S - 1)},
    )
    reaped = reaper.reap([local])
    assert [o.leftover.run_id for o in reaped] == ["legacy-old"]
    assert "no expiry label" in reaped[0].reason
    assert [lo.run_id for lo in local.leftovers()] == ["legacy-young"]


def test_older_than_still_spares_younger_leftovers(local: LocalSubstrate) -> None:
    _plant(local, "young-expired", **{kit.EXPIRES_AT: _iso(-1)})
    assert reaper.reap([local], older_than_s=3600) == []
    assert [lo.run_id for lo in local.leftovers()] == ["young-expired"]


class _Stubborn(LocalSubstrate):
    """A substrate one of whose environments can't be removed."""

    def destroy(self, env: Environment, timeout_s: float) -> None:
        if env.run_id == "stuck":
            raise CreateFailed("the API refuses to delete it")
        super().destroy(env, timeout_s)


def test_one_removal_that_fails_does_not_stop_the_others(
    tmp_path: Path, attrs_fixture: Any
) -> None:
    sub = _Stubborn(root=tmp_path / "envs", template=attrs_fixture.template)
    for run_id in ("stuck", "z-next"):
        _plant(sub, run_id, **{kit.EXPIRES_AT: _iso(-1)})
    errors: list[str] = []
    reaped = reaper.reap([sub], on_error=lambda name, exc: errors.append(name))
    assert [(o.leftover.run_id, o.error is not None) for o in reaped] == [
        ("stuck", True),
        ("z-next", False),
    ]
    assert errors == [sub.name]
    assert [lo.run_id for lo in sub.leftovers()] == ["stuck"]


def test_rtax_reap_says_which_leftovers_expired(tmp_path: Path, capsys: Any) -> None:
    from rtax import cli

    root = tmp_path / "envs"
    conf = tmp_path / "rtax.toml"
    conf.write_text(
        f'[[substrates]]\nname = "scratch"\nkind = "local"\nparams = {{ root = "{root}" }}\n'
    )
    sub = LocalSubstrate(name="scratch", root=root)
    _plant(sub, "expired-one", **{kit.EXPIRES_AT: _iso(-5)})
    assert cli.main(["reap", "--substrate", "scratch", "--config", str(conf)]) == 0
    out, err = capsys.readouterr()
    assert "removed scratch" in out and "expired-one" in out and "EXPIRED" in out
    assert "1 orphan(s), 1 of them expired" in err
    assert sub.leftovers() == []


# -- the scheduler reaps on a schedule ---------------------------------------------------------


class _Unlistable(LocalSubstrate):
    def leftovers(self) -> list[Leftover]:
        raise ConnectionError("control plane unreachable")


def test_the_scheduler_reaps_expired_leftovers_while_it_runs(
    tmp_path: Path, attrs_fixture: Any
) -> None:
    """Reaped every `reap_interval`, not only at start: a leftover that expires while the
    scheduler (its owner, alive) runs is removed; one within its expiry is not; a substrate
    that can't even be listed does not stop the reaper or the monitor."""
    file = tmp_path / "rtax.toml"
    file.write_text("""
database = "rtax.db"
[scheduler]
reap_interval = "1s"
[[substrates]]
name = "local"
kind = "local"
[[substrates]]
name = "broken"
kind = "local"
[[plans]]
name = "idle"
substrates = ["local"]
tier = "T0"
interval = "1h"
""")
    conf = config.load(file)
    assert conf.reap_interval_s == 1.0
    params = {"root": tmp_path / "envs", "template": attrs_fixture.template}

    def factory(entry: Any, overrides: dict[str, Any]) -> LocalSubstrate:
        kind = _Unlistable if entry.name == "broken" else LocalSubstrate
        return kind(name=entry.name, **params, **overrides)

    local = LocalSubstrate(name="local", **params)
    scheduler = Scheduler(conf, factory=factory, fixture=attrs_fixture)
    scheduler.start()
    try:
        # made after the start-up reap, by this (live) process: only its expiry can free it
        _plant(local, "expires-soon", **{kit.EXPIRES_AT: _iso(1.5)})
        _plant(local, "in-use")
        wait_for(
            lambda: "expires-soon" not in [lo.run_id for lo in local.leftovers()],
            "the expired leftover reaped",
        )
        assert "in-use" in [lo.run_id for lo in local.leftovers()]
        assert not scheduler.stopped.is_set()
        assert scheduler._scheduler.get_job("reaper") is not None
    finally:
        scheduler.stop(wait=True)
        for leftover in local.leftovers():
            local.destroy(leftover, 30)


# -- Docker: a create that fails after the engine made the container ----------------------------


def test_a_docker_500_after_the_create_leaves_no_container(runner_image: str) -> None:
    """The engine made the container and answered an error (a 500 after the write): the
    substrate removes it by name, nothing outlives the failed create."""
    import docker

    from rtax.substrates.docker.substrate import DockerSubstrate

    sub = DockerSubstrate(name="docker-leaks", image=runner_image)
    real = sub.api.create_container

    def made_then_500(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        response = type("R", (), {"status_code": 500, "reason": "Internal Server Error"})()
        raise docker.errors.APIError("500 Server Error", response, "driver failed after create")

    sub.api.create_container = made_then_500  # the real create, then the error answer
    try:
        with pytest.raises(CreateFailed, match="500"):
            sub.create("docker-500-after-create")
        assert [lo.run_id for lo in sub.leftovers()] == []
    finally:
        for leftover in sub.leftovers():
            sub.destroy(leftover, 60)
        sub.close()


def test_reaper_reasons_name_the_host_rule(local: LocalSubstrate) -> None:
    """A crashed owner on this host is still reaped at once, before its expiry."""
    _plant(local, "crashed", **{kit.OWNER: f"{kit.owner_host()}:999999999"})
    reaped = reaper.reap([local])
    assert [(o.leftover.run_id, o.expired) for o in reaped] == [("crashed", False)]
    assert "owner pid 999999999 is gone" in reaped[0].reason


def test_an_owner_of_the_same_host_name_in_another_pid_namespace_is_not_checked_by_pid() -> None:
    """A container with ``--network host`` has the host's name and pids of its own: a live
    process outside it looks gone from inside. Only an owner of this host name *and* this pid
    namespace is judged by its pid; another one waits for the expiry."""
    now = datetime.now(UTC)
    later = (now + timedelta(hours=1)).isoformat()
    dead = 999999999
    same_name_other_ns = Leftover(
        "e1", "r1", owner=f"{socket.gethostname()}/1:{dead}", created_at=now.isoformat(),
        expires_at=later,
    )  # fmt: skip
    assert reaper.why_orphan(same_name_other_ns, older_than_s=None, now=now) is None
    ours = Leftover(
        "e2", "r2", owner=f"{kit.owner_host()}:{dead}", created_at=now.isoformat(),
        expires_at=later,
    )  # fmt: skip
    assert reaper.why_orphan(ours, older_than_s=None, now=now) == f"owner pid {dead} is gone"


def test_containerds_copy_of_a_restore_is_found_by_its_marker_and_only_its_own(
    tmp_path: Path,
) -> None:
    """containerd unpacks each restored checkpoint into a ``ctrd-checkpoint*`` folder it never
    removes; rtax removes its own copy, named by the file unique to that restore, and leaves
    another restore's and another tool's alone."""
    from rtax.substrates.docker import snapshot

    def unpacked(name: str, marker: str | None) -> Path:
        folder = tmp_path / f"{snapshot.UNPACKED_PREFIX}{name}"
        folder.mkdir()
        (folder / "core-1.img").write_bytes(b"\0" * 64)
        if marker is not None:
            (folder / snapshot.MARKER).write_text(marker)
        return folder

    mine, other, foreign = unpacked("1", "run-a"), unpacked("2", "run-b"), unpacked("3", None)
    assert set(snapshot.unpacked_copies(None, {tmp_path})) == {mine, other}
    assert snapshot.remove_unpacked("run-a", {tmp_path}) == 1
    assert not mine.exists() and other.exists() and foreign.exists()
    assert snapshot.remove_unpacked("run-a", {tmp_path}) == 0


def test_containerds_temporary_directory_is_read_from_its_own_environment(tmp_path: Path) -> None:
    """Go's os.MkdirTemp(XDG_RUNTIME_DIR) is where containerd unpacks: its XDG_RUNTIME_DIR, else
    its TMPDIR, else /tmp; read from each containerd's /proc entry (a fault suite's private
    engine runs one of its own), /tmp when none is seen."""
    from rtax.substrates.docker import snapshot

    def process(pid: int, comm: str, **environ: str) -> None:
        entry = tmp_path / str(pid)
        entry.mkdir()
        (entry / "comm").write_text(comm + "\n")
        (entry / "environ").write_bytes(b"".join(f"{k}={v}\0".encode() for k, v in environ.items()))

    assert snapshot.containerd_temp_dirs(tmp_path) == {Path("/tmp")}
    process(10, "containerd", PATH="/usr/bin", XDG_RUNTIME_DIR="/run/user/0", TMPDIR="/var/tmp")
    process(11, "containerd", TMPDIR="/var/tmp/x")
    process(12, "dockerd", TMPDIR="/elsewhere")
    process(13, "containerd")
    (tmp_path / "self").mkdir()
    assert snapshot.containerd_temp_dirs(tmp_path) == {
        Path("/run/user/0"),
        Path("/var/tmp/x"),
        Path("/tmp"),
    }
