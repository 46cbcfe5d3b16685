"""A planted credential never reaches the database, the logs, the CSV exports or the dashboard.

For each cloud kind: an emulation that requires the planted secret, a substrate built the way
the scheduler builds it (the configuration names an environment variable, `*_env`), one
successful rollout and one refused by an API that echoes the credential back in its error, with
every logger at DEBUG. Then the secret is searched for in the database file's bytes, both CSV
exports, everything logged or printed, `describe()`, and every dashboard page rendered on that
database.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from rtax import workloads
from rtax.config import SubstrateConfig, build_substrate
from rtax.probe import run_rollout
from rtax.store import Store

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PAGES = ("overview", "cold_start", "decomposition", "amortization", "projection", "data")
VAR = "RTAX_PLANTED_SECRET"


@dataclass
class Planted:
    secret: str
    substrate: Any
    refuse: Callable[[], None]  # the next create is refused, the error echoing the secret
    close: Callable[[], None]


def _kubernetes(image: str, monkeypatch: pytest.MonkeyPatch) -> Planted:
    from rtax.emulation.kubernetes import KubernetesEmulation

    secret = "rtax-planted-k8s-token-5f2c9a"
    emu = KubernetesEmulation(image=image, token=secret)
    emu.start()
    monkeypatch.setenv(VAR, secret)
    conf = SubstrateConfig("kubernetes", "kubernetes", {**emu.substrate_params(), "token_env": VAR})
    return Planted(
        secret,
        build_substrate(conf, {}),
        lambda: emu.faults.fail("create", 403, message=f"token {secret} is not allowed"),
        emu.stop,
    )


def _daytona(image: str, monkeypatch: pytest.MonkeyPatch) -> Planted:
    from rtax.emulation.daytona import DaytonaEmulation

    emu = DaytonaEmulation(image=image)
    emu.start()
    secret = emu.api_key  # the emulation's key: the only one it accepts
    monkeypatch.setenv(VAR, secret)
    params = {k: v for k, v in emu.substrate_params().items() if k != "api_key"}
    conf = SubstrateConfig("daytona", "daytona", {**params, "api_key_env": VAR})
    sub = build_substrate(conf, {})

    def close() -> None:
        sub.close()
        emu.stop()

    return Planted(
        secret, sub, lambda: emu.faults.fail("create", 403, message=f"bad key {secret}"), close
    )


def _ec2(image: str, monkeypatch: pytest.MonkeyPatch) -> Planted:
    """AWS's credential chain reads the environment, so the secret goes there; fidelity real
    makes the substrate use that chain (with fidelity emulated it sends fixed fake keys).

    Unlike the others, the refusal here does not echo the secret: AWS never has it to echo
    (SigV4 signs with the key, never sends it), and botocore's own DEBUG log prints response
    bodies verbatim, which no substrate can redact. What this case checks is that nothing rtax
    records or shows carries the key from the environment."""
    from rtax.emulation.ec2 import Ec2Emulation

    secret = "rtax-planted-aws-secret-key-9d41e7"
    emu = Ec2Emulation(image=image)
    emu.start()
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIARTAXPLANTED00001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    conf = SubstrateConfig("ec2", "ec2", {**emu.substrate_params(), "fidelity": "real"})
    return Planted(
        secret,
        build_substrate(conf, {}),
        lambda: emu.faults.fail("RunInstances", code="UnauthorizedOperation"),
        emu.stop,
    )


KINDS: dict[str, Callable[[str, pytest.MonkeyPatch], Planted]] = {
    "kubernetes": _kubernetes,
    "daytona": _daytona,
    "ec2": _ec2,
}


@pytest.fixture(params=sorted(KINDS))
def planted(request, runner_image: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Planted]:
    made = KINDS[request.param](runner_image, monkeypatch)
    try:
        yield made
    finally:
        made.close()


def _dashboard_text(db: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Everything every page shows on `db`: texts, tables (as CSV) and widget values."""
    monkeypatch.setenv("RTAX_DB", str(db))
    st.cache_data.clear()
    shown = []
    at = AppTest.from_file(APP, default_timeout=60)
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


def test_planted_secret_is_nowhere(
    planted: Planted,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = planted.secret
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
    ok = run_rollout(planted.substrate, workloads.build("T0"))
    assert ok.ok, ok.run
    planted.refuse()
    refused = run_rollout(planted.substrate, workloads.build("T0"))
    assert refused.run["error_class"] == "create_failed", refused.run
    db = tmp_path / "rtax.db"
    with Store(db) as store:
        store.save_rollout(ok)
        store.save_rollout(refused)
        exports = []
        for table in ("runs", "actions"):
            store.export_csv(table, tmp_path / f"{table}.csv")
            exports.append((tmp_path / f"{table}.csv").read_text())
    out, err = capfd.readouterr()
    places = {
        "database file": db.read_bytes().decode("utf-8", "replace"),
        "CSV exports": "\n".join(exports),
        "log records": "\n".join(
            f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records
        ),
        "stdout/stderr": out + err,
        "describe()": json.dumps(planted.substrate.describe(), default=str),
        "dashboard": _dashboard_text(db, monkeypatch),
    }
    assert len(caplog.records) > 0  # the search below covered real log traffic
    leaked = [where for where, text in places.items() if secret in text]
    assert leaked == [], f"the planted secret reached: {', '.join(leaked)}"
