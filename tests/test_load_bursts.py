"""Real bursts (issue 14's acceptance): 20 T0 rollouts at once on the real Docker engine and on
the Daytona emulation (the real SDK over real HTTP, every sandbox a real container), each load
record checked against its stored rollouts (tests/loadcheck.py), and nothing left behind; a
Ctrl-C in the middle of `rtax burst` on Docker cleans up every container it made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from loadcheck import check_load
from polling import deadline_s, wait_for
from rtax.core import workloads
from rtax.core.options import RolloutOptions
from rtax.emulation.daytona import DaytonaEmulation
from rtax.rollouts import burst
from rtax.settings.loads import LoadPlan
from rtax.store.database import Store
from rtax.store.spool import Spool
from rtax.substrates import get_substrate, kit

ROOT = Path(__file__).resolve().parent.parent


def _ours(docker_api, pid: int) -> list[dict]:
    """Containers labelled rtax whose owner is process `pid` on this host."""
    owner = f"{kit.owner_host()}:{pid}"
    found = docker_api.containers(all=True, filters={"label": "rtax"})
    return [c for c in found if c["Labels"].get(kit.OWNER) == owner]


@pytest.fixture(scope="module")
def bursts_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One database for both real bursts: the Capacity page is read from it at the end."""
    return tmp_path_factory.mktemp("bursts") / "bursts.db"


def test_a_burst_of_20_on_docker(docker_api, runner_image: str, bursts_db: Path) -> None:
    db = bursts_db
    done = burst.burst(LoadPlan("docker", n=20), db=db, deadline=300)
    assert done.interrupted is None and not done.spooled
    problems = [(r.run["error_class"], r.run["error_message"]) for r in done.records if not r.ok]
    assert problems == []
    with Store(db) as store:
        row = check_load(store, done.load_id)
        assert len(store.runs.read(substrate="docker")) == 20
    assert row["fidelity"] == "real" and row["kind"] == "docker"
    assert row["ready"] == 20 and row["time_to_all_ready_s"] >= row["time_to_first_ready_s"]
    assert row["concurrency"] > 1  # the engine saw them overlap, whatever it made of them
    assert _ours(docker_api, os.getpid()) == []


@pytest.fixture(scope="module")
def daytona(runner_image: str) -> Iterator[DaytonaEmulation]:
    with DaytonaEmulation(image=runner_image) as emu:
        yield emu


def test_a_burst_of_20_on_the_daytona_emulation(daytona: DaytonaEmulation, bursts_db: Path) -> None:
    """Three creates refused with 429 (retried: three rate-limit waits) and one sandbox that
    fails to start (environment_lost): the record counts both as its rollouts do."""
    sub = get_substrate("daytona", **daytona.substrate_params(), rate_limit_base_s=0.01)
    db = bursts_db
    plan = LoadPlan("daytona", n=20)
    try:
        daytona.faults.fail("create", 429, message="Too many requests", times=3)
        daytona.faults.fail("start", message="no runner with capacity in region emulated")
        result = burst.BurstResult(db, plan=plan, load_id="daytona-burst")
        with Store(db) as store:
            burst.run(
                sub,
                workloads.build("T0"),
                plan,
                store=store,
                spool=Spool(db, lambda: Store(db)),
                result=result,
                options=RolloutOptions(deadline_s=300),
            )
            row = check_load(store, result.load_id)
        assert sub.leftovers() == []
    finally:
        daytona.faults.clear()
        sub.close()
    assert row["fidelity"] == "emulated" and row["rollouts"] == 20
    assert row["rate_limit_waits"] == 3 and row["rate_limit_wait_s"] > 0
    assert json.loads(row["failures"]) == {"environment_lost": 1}
    assert row["ok"] == 19 and row["ready"] == 19
    assert pd.isna(row["time_to_all_ready_s"])  # one never got there
    assert row["time_to_first_ready_s"] > 0


def test_the_capacity_page_shows_both_bursts_envelopes(bursts_db: Path) -> None:
    """The Capacity page in real Chromium, from the two real bursts above: an envelope per
    series, each the one `rtax.analysis.envelope` fits from the file."""
    from browser import chromium, dashboard, new_page
    from rtax.analysis import envelope
    from rtax.dashboard import capacity

    if not bursts_db.exists():
        pytest.fail("the two bursts above did not run (run the whole module)")
    with Store(bursts_db, create=False) as store:
        loads = store.loads.read()
        points = envelope.points(loads, store.loads.rollouts(list(loads["load_id"])))
        fitted = capacity.labelled(envelope.fit(points))
    assert len(fitted) == 2, fitted
    with (
        chromium() as browser,
        dashboard({"RTAX_DB": str(bursts_db)}) as url,
        new_page(browser, viewport={"width": 1400, "height": 2400}) as page,
    ):
        page.goto(f"{url}/capacity")
        page.get_by_role("heading", name="Envelope").wait_for()
        for label in ("docker T0", "daytona [emulated] T0"):
            metric = page.get_by_test_id("stMetric").filter(has_text=f"{label}: concurrency held")
            metric.wait_for()
            row = fitted[fitted["series"] == label].iloc[0]
            held = row["held_concurrency"]
            value = metric.get_by_test_id("stMetricValue").inner_text()
            assert value == ("none" if held != held else f"{held:g}"), (label, value)
        assert page.locator('[data-testid="stException"]').count() == 0


def test_ctrl_c_in_a_docker_burst_leaves_nothing(docker_api, runner_image: str, tmp_path) -> None:
    db = tmp_path / "stopped.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax", "burst", "--substrate", "docker", "--shape",
         "staggered", "--every", "300ms", "-n", "15", "--db", str(db), "--quiet"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        # Made so far, not alive at once: a T0 container can be gone before the next is made
        # (300 ms apart), so counting those that coexist waits for a slow machine.
        made: set[str] = set()

        def two_made() -> bool:
            made.update(c["Id"] for c in _ours(docker_api, proc.pid))
            return len(made) >= 2

        wait_for(two_made, "two containers made")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=deadline_s(180))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted: load" in err and "still busy" not in err
    assert _ours(docker_api, proc.pid) == []  # every container it made is gone
    with Store(db) as store:
        (load_id,) = store.loads.read()["load_id"]
        row = check_load(store, load_id, complete=False)
    assert row["rollouts"] < 15
