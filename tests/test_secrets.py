"""A planted credential never reaches a command's environment, the database, the logs, the CSV
exports or the dashboard, on every substrate kind.

For each kind (local, docker in both action modes, docker-gvisor, podman, and kubernetes, ec2,
daytona through their emulations): credentials are planted in this process's environment
before the substrate is built the way the scheduler builds it (`build_substrate`): AWS keys, a
Daytona key, a token a ``*_env`` parameter names, a proxy URL with a password, and a Docker
client configuration whose proxies carry one (docker-py copies those into every container it
creates unless told not to). Then, with every logger at DEBUG:

- a command that prints its environment must see none of them (and must see the allow-list);
- a rollout whose command prints its environment and fails (the output lands in
  ``actions.detail``), and for the clouds one refused by an API that echoes the credential;
- a chained exception carrying a secret, with its own ``__str__``, logged by ``log.exception``.

Then every planted value is searched for in the database file's bytes (and -wal), both CSV
exports, everything logged or printed, the spool file if any, `describe()` and every dashboard
page rendered on that database. For podman, the CLI processes' own environments are searched
too (a wrapper records them).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from polling import DEADLINE_S
from rtax.core import workloads
from rtax.core.failures import SubstrateError
from rtax.rollouts.rollout import run_rollout
from rtax.settings import SubstrateConfig
from rtax.store.database import Store
from rtax.substrates import build_substrate, kit

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PAGES = (
    "overview",
    "cold_start",
    "decomposition",
    "amortization",
    "projection",
    "capacity",
    "data",
)
#: the variable a ``*_env`` parameter names (a token for kubernetes, the key for daytona)
VAR = "RTAX_PLANTED_TOKEN"
AWS_SECRET = "rtax-planted-aws-secret-key-9d41e7"
DAYTONA_KEY = "rtax-planted-daytona-key-77b0c1"
TOKEN = "rtax-planted-env-token-5f2c9a"
PROXY_PASSWORD = "rtax-planted-proxy-pw-3e8d"
DOCKER_PROXY_PASSWORD = "rtax-planted-docker-config-proxy-pw-c41a"
#: the command that shows its environment, then again the lines that matter (a failure's
#: detail is the tail of its output), and fails
SHOW_ENV = (
    "env >&2; env | grep -iE 'proxy|secret|token|key|planted' >&2; "
    "env | grep '^LC_ALL=' >&2; exit 3"
)


@dataclass
class Planted:
    substrate: Any
    #: every value that must be nowhere
    secrets: list[str]
    close: Callable[[], None]
    #: the next create is refused by an API that echoes a secret (the clouds only)
    refuse: Callable[[], None] | None = None
    #: where the CLI processes recorded their environments (podman)
    cli_env_dump: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _plant(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Credentials in this process's environment, and a Docker client configuration whose
    proxies carry a password; returns every planted value."""
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIARTAXPLANTED00001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("DAYTONA_API_KEY", DAYTONA_KEY)
    monkeypatch.setenv(VAR, TOKEN)
    monkeypatch.setenv("HTTPS_PROXY", f"http://rtax:{PROXY_PASSWORD}@127.0.0.1:9/")
    monkeypatch.setenv("NO_PROXY", "*")  # the proxy is planted, never used
    config = tmp_path / "docker-config"
    config.mkdir()
    proxy = f"http://rtax:{DOCKER_PROXY_PASSWORD}@127.0.0.1:9"
    (config / "config.json").write_text(
        json.dumps({"proxies": {"default": {"httpProxy": proxy, "httpsProxy": proxy}}})
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    return [AWS_SECRET, DAYTONA_KEY, TOKEN, PROXY_PASSWORD, DOCKER_PROXY_PASSWORD]


def _local(request, planted: list[str], tmp_path: Path) -> Planted:
    fixture = request.getfixturevalue("attrs_fixture")
    conf = SubstrateConfig(
        "local", "local", {"root": str(tmp_path / "envs"), "template": str(fixture.template)}
    )
    return Planted(build_substrate(conf, {}), planted, lambda: None)


def _docker(runtime: str | None, mode: str = "exec") -> Callable[..., Planted]:
    def make(request, planted: list[str], tmp_path: Path) -> Planted:
        request.getfixturevalue("runner_image")
        if runtime:
            request.getfixturevalue("gvisor")
        params = {"runtime": runtime, "mode": mode} if runtime else {"mode": mode}
        sub = build_substrate(SubstrateConfig("docker", "docker", params), {})
        return Planted(sub, planted, sub.close)

    return make


def _podman(request, planted: list[str], tmp_path: Path) -> Planted:
    """Through a wrapper that appends its own environment to a file, then execs podman: what
    the CLI processes were given is searched too."""
    request.getfixturevalue("prepared_podman")
    dump = tmp_path / "podman-cli-env"
    wrapper = tmp_path / "podman-wrapper"
    wrapper.write_text(f'#!/bin/sh\nenv >> {dump}\nexec {shutil.which("podman")} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    conf = SubstrateConfig("podman", "podman", {"podman": str(wrapper)})
    return Planted(build_substrate(conf, {}), planted, lambda: None, cli_env_dump=dump)


def _kubernetes(request, planted: list[str], tmp_path: Path) -> Planted:
    from rtax.emulation.kubernetes import KubernetesEmulation

    emu = KubernetesEmulation(image=request.getfixturevalue("runner_image"), token=TOKEN)
    emu.start()
    conf = SubstrateConfig("kubernetes", "kubernetes", {**emu.substrate_params(), "token_env": VAR})
    return Planted(
        build_substrate(conf, {}),
        planted,
        emu.stop,
        refuse=lambda: emu.faults.fail("create", 403, message=f"token {TOKEN} is not allowed"),
    )


def _daytona(request, planted: list[str], tmp_path: Path, monkeypatch) -> Planted:
    from rtax.emulation.daytona import DaytonaEmulation

    emu = DaytonaEmulation(image=request.getfixturevalue("runner_image"))
    emu.start()
    monkeypatch.setenv(VAR, emu.api_key)  # the emulation's key: the only one it accepts
    params = {k: v for k, v in emu.substrate_params().items() if k != "api_key"}
    sub = build_substrate(SubstrateConfig("daytona", "daytona", {**params, "api_key_env": VAR}), {})

    def close() -> None:
        sub.close()
        emu.stop()

    return Planted(
        sub,
        [*planted, emu.api_key],
        close,
        refuse=lambda: emu.faults.fail("create", 403, message=f"bad key {emu.api_key}"),
    )


def _ec2(request, planted: list[str], tmp_path: Path) -> Planted:
    """AWS's credential chain reads the environment; fidelity real makes the substrate use that
    chain (with fidelity emulated it sends fixed fake keys). The refusal does not echo the key:
    AWS never has it to echo (SigV4 signs with it, never sends it)."""
    from rtax.emulation.ec2 import Ec2Emulation

    emu = Ec2Emulation(image=request.getfixturevalue("runner_image"))
    emu.start()
    conf = SubstrateConfig("ec2", "ec2", {**emu.substrate_params(), "fidelity": "real"})
    return Planted(
        build_substrate(conf, {}),
        planted,
        emu.stop,
        refuse=lambda: emu.faults.fail("RunInstances", code="UnauthorizedOperation"),
    )


KINDS: dict[str, Callable[..., Planted]] = {
    "local": _local,
    "docker": _docker(None),
    "docker-session": _docker(None, mode="session"),
    "docker-gvisor": _docker("runsc"),
    "podman": _podman,
    "kubernetes": _kubernetes,
    "daytona": _daytona,
    "ec2": _ec2,
}


@pytest.fixture(scope="module")
def prepared_podman(runner_image: str) -> None:
    """The runner image in podman's store (copied from Docker, as tests/test_substrate_podman
    does), before any secret is planted."""
    from rtax.substrates.podman import PodmanSubstrate

    if shutil.which("podman") is None:
        reason = "no podman here; run `make test` as root (it installs podman and catatonit)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI requires podman: {reason}")
        pytest.skip(reason)
    PodmanSubstrate().prepare(log=lambda message: None)


@pytest.fixture(params=list(KINDS))
def planted(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Planted]:
    secrets = _plant(monkeypatch, tmp_path)
    make = KINDS[request.param]
    extra = {"monkeypatch": monkeypatch} if request.param == "daytona" else {}
    made = make(request, secrets, tmp_path, **extra)
    try:
        yield made
    finally:
        made.close()


class Refused(Exception):
    """An error whose message is built by its own ``__str__`` from an attribute (as
    kubernetes' ApiException and botocore's ClientError are)."""

    def __init__(self, body: str) -> None:
        super().__init__()
        self.body = body

    def __str__(self) -> str:
        return f"refused: {self.body}"


def _log_chained(secret: str) -> None:
    """What a caller of a substrate does with an unexpected failure: ``log.exception`` of an
    error whose cause carries the secret."""
    try:
        try:
            raise Refused(f'{{"message": "credential {secret} is not allowed"}}')
        except Refused as cause:
            raise SubstrateError("create failed") from cause
    except SubstrateError:
        logging.getLogger("rtax.test_secrets").exception("rollout failed (%s)", secret)


def _env_of_a_command(sub: Any) -> str:
    env = sub.create("secrets-env")
    try:
        sub.wait_running(env, DEADLINE_S)
        result = sub.run(env, "env", 60)
    finally:
        sub.destroy(env, 120)
    assert result.exit_code == 0, result
    return result.stdout


def _dashboard_text(db: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Everything every page shows on `db`: texts, tables (as CSV) and widget values."""
    monkeypatch.setenv("RTAX_DB", str(db))
    st.cache_data.clear()
    shown = []
    at = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    at.run()
    for page in PAGES:
        at.switch_page(f"pages/{page}.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        for kind in ("markdown", "caption", "title", "subheader", "info", "warning", "error"):
            shown.extend(str(e.value) for e in getattr(at, kind))
        shown.extend(frame.value.to_csv() for frame in at.dataframe)
        shown.extend(str(getattr(e, "value", "")) for e in at.selectbox)
        shown.extend(str(getattr(e, "value", "")) for e in at.multiselect)
    assert any("Overview" in text for text in shown)  # the pages did render something
    return "\n".join(shown)


def _files(db: Path) -> str:
    """The database file and its companions (-wal, -shm, the spool), as text."""
    found = sorted(db.parent.glob(db.name + "*"))
    assert db in found
    return "\n".join(path.read_bytes().decode("utf-8", "replace") for path in found)


def test_planted_secret_is_nowhere(
    planted: Planted,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in (
        "urllib3",
        "kubernetes",
        "websocket",
        "httpx",
        "httpcore",
        "socketio",
        "engineio",
        "botocore",
        "boto3",
        "daytona",
        "rtax",
    ):
        logging.getLogger(name).setLevel(logging.DEBUG)
    sub = planted.substrate

    seen = _env_of_a_command(sub)
    assert [s for s in planted.secrets if s in seen] == [], seen
    for key, value in kit.COMMAND_ENV.items():
        assert f"{key}={value}" in seen  # the allow-list is what commands get

    shows_env = workloads.Workload("T0", 0, 0, actions=(workloads.Action("exec", SHOW_ENV),))
    failed = run_rollout(sub, shows_env)
    assert failed.run["error_class"] == "workload_failed", failed.run
    assert "LC_ALL=C.UTF-8" in failed.actions[-1]["detail"]  # the environment was printed
    records = [failed]
    if planted.refuse is not None:
        planted.refuse()
        refused = run_rollout(sub, workloads.build("T0"))
        assert refused.run["error_class"] == "create_failed", refused.run
        records.append(refused)
    for secret in planted.secrets:
        if secret != DOCKER_PROXY_PASSWORD:  # only docker-py reads that file, never rtax
            _log_chained(secret)

    db = tmp_path / "rtax.db"
    with Store(db) as store:
        for record in records:
            store.save_rollout(record)
        exports = []
        for table in ("runs", "actions"):
            store.runs.export_csv(table, tmp_path / f"{table}.csv")
            exports.append((tmp_path / f"{table}.csv").read_text())
        during = _files(db)
    out, err = capfd.readouterr()
    places = {
        "database files": during + _files(db),
        "CSV exports": "\n".join(exports),
        "log records": "\n".join(
            f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records
        ),
        "formatted logs": caplog.text,
        "stdout/stderr": out + err,
        "describe()": json.dumps(sub.describe(), default=str),
        "dashboard": _dashboard_text(db, monkeypatch),
    }
    if planted.cli_env_dump is not None:
        places["podman CLI environment"] = planted.cli_env_dump.read_text()
    assert any("rollout failed" in r.getMessage() for r in caplog.records)
    leaked = {
        where: [s for s in planted.secrets if s in text]
        for where, text in places.items()
        if any(s in text for s in planted.secrets)
    }
    assert leaked == {}, f"planted secrets reached: {leaked}"
