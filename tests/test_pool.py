"""The warm pool (rtax.substrates.pool): its semantics on a substrate whose creates the test
releases one by one, then the real thing on `local` and on a real Docker engine: the contract
through the pool, claims against cold starts, labels and the reaper, and nothing left behind.

Why a gated substrate: the pool's rules (FIFO claims, at most `refill_concurrency` creates in
flight, never more than `size` environments, a slot refilled per claim) are about the order of
events across threads; holding each create until the test lets it go makes that order exact
without a sleep. Waiting for a thread is polling with a deadline (`tests/polling.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import engine
from contract import SubstrateContract
from polling import deadline_s, joined, wait_for
from rtax.core import workloads
from rtax.core.failures import ClaimTimeout, CreateFailed, SubstrateError
from rtax.core.workloads import RepoSource
from rtax.rollouts.rollout import run_rollout
from rtax.store.database import Store
from rtax.substrates import kit, reaper
from rtax.substrates.base import Claims, CommandResult, Environment, Leftover, Substrate
from rtax.substrates.local import LocalSubstrate
from rtax.substrates.pool import PoolSettings, WarmPool

LIFETIME = 600.0


class Gated:
    """A substrate whose every create waits for the test to `release` it; everything else is
    instant. It counts creates in flight (and their maximum) and what it destroyed."""

    kind = "gated"
    fidelity = "real"
    mode = "exec"
    host_address = None

    def __init__(self, fail_from: int | None = None) -> None:
        self.name = "gated"
        self.gate = threading.Semaphore(0)
        self.lock = threading.Lock()
        self.made = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.destroyed: list[str] = []
        self.lifetimes: list[float | None] = []
        #: creates from this one on (1 = the first) fail after their release
        self.fail_from = fail_from

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self.gate.release()

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.gate.acquire()
        with self.lock:
            self.in_flight -= 1
            self.made += 1
            n = self.made
            self.lifetimes.append(lifetime_s)
        if self.fail_from is not None and n >= self.fail_from:
            raise CreateFailed(f"create {n} refused")
        env = Environment(env_id=f"env-{n}", run_id=run_id)
        env.mark("created")
        return env

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        env.mark("running")

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        return CommandResult(0, "ok\n", "", 0.001)

    def destroy(self, env: Environment, timeout_s: float) -> None:
        with self.lock:
            self.destroyed.append(env.env_id)

    def leftovers(self) -> list[Leftover]:
        return []

    def prepare(self, log: Any) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "endpoint": "gated://"}

    def close(self) -> None:
        pass


def _pool(inner: Any, size: int, concurrency: int, **kw: Any) -> WarmPool:
    settings = PoolSettings(size, concurrency, kw.pop("max_idle_s", 600.0))
    return WarmPool(inner, settings, rollout_lifetime_s=LIFETIME, retry_pause_s=0.01, **kw)


def _claim(pool: WarmPool, run_id: str, timeout_s: float = 30.0) -> Environment:
    return pool.claim(run_id, lifetime_s=LIFETIME, timeout_s=timeout_s)


def _in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(fn(*args))
        except Exception as exc:  # handed to the test
            out.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


@pytest.fixture
def closing():
    """Pools a test made, closed whatever happens (a gated create still waiting is let go
    first: closing waits for the creates in flight, as it must, to destroy what they make)."""
    made: list[WarmPool] = []
    yield made.append
    for pool in made:
        if isinstance(pool.inner, Gated):
            pool.inner.release(10_000)
        pool.close()


# -- the semantics ----------------------------------------------------------------------------


def test_settings_are_checked() -> None:
    assert PoolSettings(4, 2).describe() == {"size": 4, "refill_concurrency": 2, "max_idle_s": 600}
    for bad in ((0, 1), (2, 0), (2, 3), (True, 1), (2, 1.5)):
        with pytest.raises(ValueError):
            PoolSettings(*bad)
    with pytest.raises(ValueError, match="max_idle"):
        PoolSettings(2, 1, 0)


def test_a_pool_speaks_the_protocol_and_claims() -> None:
    pool = _pool(Gated(), 1, 1)
    assert isinstance(pool, Substrate) and isinstance(pool, Claims)
    assert not isinstance(Gated(), Claims)  # a plain substrate is cold
    assert (pool.name, pool.kind, pool.mode) == ("gated", "gated", "exec")
    assert pool.describe()["pool"] == {"size": 1, "refill_concurrency": 1, "max_idle_s": 600.0}


def test_filling_makes_size_environments_with_at_most_the_concurrency_in_flight(closing) -> None:
    inner = Gated()
    pool = _pool(inner, 4, 2)
    closing(pool)
    filler, done = _in_thread(pool.fill)
    wait_for(lambda: inner.in_flight == 2, "two creates in flight")
    assert pool.counts()["in_flight"] == 2
    for made in range(1, 5):
        inner.release()
        wait_for(lambda m=made: pool.counts()["made"] == m, f"environment {made} made")
    joined(filler, "the fill")
    assert done == [None] and inner.max_in_flight == 2
    assert pool.counts() == {"ready": 4, "in_flight": 0, "waiting": 0, "failures": 0, "made": 4}
    # every environment is labelled to outlive its wait in the pool and one rollout
    assert inner.lifetimes == [600.0 + LIFETIME] * 4


def test_claims_are_first_come_first_served_and_each_frees_one_slot(closing) -> None:
    inner = Gated()
    pool = _pool(inner, 2, 1)
    closing(pool)
    inner.release(2)
    pool.fill()
    first, second = _claim(pool, "r1"), _claim(pool, "r2")
    assert (first.env_id, second.env_id) == ("env-1", "env-2")  # the oldest first
    assert (first.run_id, first.pool["found_ready"], second.pool["found_ready"]) == ("r1", 2, 1)
    # two slots to refill, one create at a time: the pool never holds more than its size
    wait_for(lambda: inner.in_flight == 1, "the first refill in flight")
    third, got3 = _in_thread(_claim, pool, "r3")
    wait_for(lambda: pool.counts()["waiting"] == 1, "claim r3 waiting")
    fourth, got4 = _in_thread(_claim, pool, "r4")
    wait_for(lambda: pool.counts()["waiting"] == 2, "claim r4 waiting behind it")
    inner.release()
    joined(third, "claim r3")
    assert [e.env_id for e in got3] == ["env-3"] and got4 == []  # r3 asked first, r3 got it
    assert got3[0].pool["found_ready"] == 0 and got3[0].pool["waited_s"] > 0
    inner.release()
    joined(fourth, "claim r4")
    assert [e.env_id for e in got4] == ["env-4"]
    # four claims from a pool of two: 2 + 4 environments made in all, never more in flight
    inner.release(2)
    wait_for(lambda: pool.counts()["ready"] == 2, "the pool full again")
    assert inner.made == 6 and inner.max_in_flight == 1
    assert pool.counts()["in_flight"] == 0 and inner.in_flight == 0


def test_what_the_pool_made_is_a_cold_start_kept_with_the_claim(closing) -> None:
    inner = Gated()
    pool = _pool(inner, 1, 1)
    closing(pool)
    inner.release()
    pool.fill()
    env = _claim(pool, "r1")
    made = env.pool
    assert made["env_id"] == "env-1" and made["pool_run_id"].startswith("pool-")
    assert made["time_to_first_command_s"] == pytest.approx(
        made["create_s"] + made["orchestration_s"] + made["ready_s"]
    )
    assert made["ready_attempts"] == 1 and made["settings"]["size"] == 1
    assert [m["name"] for m in made["milestones"]] == ["created", "running"]
    assert env.milestones == [] and env.resolution == {}  # the rollout's own timeline is empty
    assert pool.made[0]["env_id"] == "env-1"
    assert made["memory_bytes"] is None  # a kind that can't say what an environment holds


class Weighed(Gated):
    """A gated substrate that says what each environment holds (`Weighs`): 1 MiB per
    environment made so far, the second weighing refused."""

    def __init__(self) -> None:
        super().__init__()
        self.weighed: list[str] = []

    def memory_bytes(self, env: Environment) -> int | None:
        self.weighed.append(env.env_id)
        if len(self.weighed) == 2:
            raise SubstrateError("stats refused")
        return len(self.weighed) * 2**20


def test_the_pool_weighs_each_environment_once_as_it_is_made(closing, caplog) -> None:
    """What a pooled environment holds is asked once, by the worker that made it, before any
    claim (the claim makes no call for it), and kept with what the pool made; a refused
    weighing leaves it unknown and the environment still served."""
    inner = Weighed()
    pool = _pool(inner, 2, 1)
    closing(pool)
    inner.release(2)
    pool.fill()
    assert inner.weighed == ["env-1", "env-2"]  # both weighed before the first claim
    first, second = _claim(pool, "r1"), _claim(pool, "r2")
    assert first.pool["memory_bytes"] == 2**20
    assert second.pool["memory_bytes"] is None
    assert "stats refused" in caplog.text
    assert inner.weighed == ["env-1", "env-2"]  # the claims asked nothing


def test_a_claim_that_finds_nothing_times_out_naming_the_refills_failure(closing) -> None:
    inner = Gated(fail_from=2)
    pool = _pool(inner, 1, 1)
    closing(pool)
    inner.release()
    pool.fill()
    _claim(pool, "r1")
    inner.release(1000)  # every refill is refused
    with pytest.raises(ClaimTimeout, match=r"last failure: CreateFailed: create \d+ refused") as e:
        _claim(pool, "r2", timeout_s=0.3)
    assert e.value.error_class == "claim_timeout"
    assert pool.counts()["failures"] >= 1 and pool.counts()["waiting"] == 0


def test_a_pool_that_can_not_be_filled_says_why_and_closes(closing) -> None:
    inner = Gated(fail_from=1)
    pool = _pool(inner, 2, 1)
    closing(pool)
    inner.release(1000)
    with pytest.raises(SubstrateError, match="could not be filled: CreateFailed: create 1"):
        pool.fill()
    with pytest.raises(SubstrateError, match="closed"):
        _claim(pool, "r1")


def test_an_environment_too_old_for_a_rollout_is_never_handed_over(closing) -> None:
    """Its expiry label covers `max_idle_s` of waiting and one rollout: past that wait, a claim
    gets a fresh one and the old one is destroyed (docs/configuration.md#warm-pools)."""
    now = [1000.0]
    inner = Gated()
    pool = _pool(inner, 1, 1, max_idle_s=30.0, now=lambda: now[0])
    closing(pool)
    inner.release(2)
    pool.fill()
    with pytest.raises(SubstrateError, match="at most 600 s"):
        pool.claim("long", lifetime_s=LIFETIME + 31, timeout_s=1)
    now[0] += 31  # env-1 has waited past max_idle: its expiry would fall inside the rollout
    env = _claim(pool, "r1")
    assert env.env_id == "env-2"
    wait_for(lambda: "env-1" in inner.destroyed, "the stale environment destroyed")


def test_an_idle_environment_is_replaced_in_the_background(closing) -> None:
    inner = Gated()
    pool = _pool(inner, 1, 1, max_idle_s=0.2)
    closing(pool)
    inner.release(3)
    pool.fill()
    wait_for(lambda: "env-1" in inner.destroyed, "env-1 replaced after its idle limit")
    wait_for(lambda: pool.counts()["made"] >= 2, "a replacement made")


def test_closing_destroys_every_environment_even_one_being_made() -> None:
    inner = Gated()
    pool = _pool(inner, 3, 1)
    inner.release(2)
    filler, _ = _in_thread(pool.fill)
    wait_for(lambda: pool.counts()["made"] == 2 and inner.in_flight == 1, "third in flight")
    closer, _ = _in_thread(pool.close)
    wait_for(lambda: sorted(inner.destroyed) == ["env-1", "env-2"], "the ready ones gone")
    inner.release()  # the third create answers after the close: its worker destroys it
    joined(closer, "the close")
    joined(filler, "the fill")
    assert sorted(inner.destroyed) == ["env-1", "env-2", "env-3"]
    with pytest.raises(SubstrateError, match="closed"):
        _claim(pool, "late")


# -- real: the local substrate -----------------------------------------------------------------


def test_a_rollout_on_a_local_pool_is_warm_and_destroys_what_it_claimed(
    tmp_path: Path, attrs_fixture: Any, closing
) -> None:
    inner = LocalSubstrate(root=tmp_path / "envs", template=attrs_fixture.template)
    pool = WarmPool(inner, PoolSettings(2, 1), rollout_lifetime_s=3600 + 120)
    closing(pool)
    pool.prepare(lambda _: None)
    cold = run_rollout(inner, workloads.build("T0"))
    warm = run_rollout(pool, workloads.build("T0"))
    assert (cold.run["launch_type"], warm.run["launch_type"]) == ("cold", "warm")
    assert warm.ok, warm.run["error_message"]
    made = json.loads(warm.run["provenance"])["pool"]
    claimed = made["env_id"]
    assert not Path(claimed).exists()  # destroyed by its rollout, never back in the pool
    assert warm.run["cleanup_ok"] == 1 and warm.run["cleanup_s"] > 0
    # the claim, then its first `true`, as a cold rollout's (docs/measurement.md#launch-paths)
    assert warm.run["time_to_first_command_s"] == warm.run["claim_s"] + warm.run["ready_s"]
    assert [a["phase"] for a in warm.actions] == ["ready", "action"]
    wait_for(lambda: pool.counts()["ready"] == 2, "the claimed slot refilled")
    pool.close_pool()
    assert inner.leftovers() == []


# -- real: Docker ------------------------------------------------------------------------------

#: A name of its own, so that what these tests leave (nothing) is told from other users' work.
DOCKER_NAME = "docker-pool-test"


def _docker_pool(size: int, concurrency: int, mode: str = "exec") -> WarmPool:
    from rtax.substrates.docker.substrate import DockerSubstrate

    inner = DockerSubstrate(name=DOCKER_NAME, mode=mode)
    return WarmPool(inner, PoolSettings(size, concurrency), rollout_lifetime_s=3600 + 120)


def _left_in_docker() -> str:
    """This run's pool containers still on the engine (tests/engine.py: an earlier, killed run's
    are not this test's leak)."""
    return engine.new("ps", "-aq", "--filter", f"label={kit.SUBSTRATE}={DOCKER_NAME}")


@pytest.fixture
def repo_source(docker_repo_source: RepoSource) -> RepoSource:
    return docker_repo_source


class TestPooledDockerContract(SubstrateContract):
    """The whole contract through a warm pool in front of Docker: rollouts claim, every other
    call goes to the wrapped substrate."""

    @pytest.fixture
    def substrate(self, runner_image: str):
        pool = _docker_pool(2, 1)
        pool.prepare(lambda _: None)
        yield pool
        pool.close()
        assert _left_in_docker() == ""


def test_docker_claims_beat_cold_starts_and_the_pool_leaves_nothing(runner_image: str) -> None:
    """Cold and warm rollouts of the same T0 side by side on the real engine; the pool's
    environments carry the rtax labels and an expiry the reaper honours; nothing is left."""
    pool = _docker_pool(2, 1)
    try:
        pool.prepare(lambda _: None)
        found = {
            lo.env_id: lo
            for lo in pool.leftovers()
            if lo.run_id.startswith("pool-") and lo.owner == kit.owner()
        }
        assert len(found) == 2
        now = datetime.now(UTC)
        orphans = {o.leftover.env_id for o in reaper.find_orphans([pool.inner], now=now)}
        assert not orphans & found.keys()  # a live pool's: spared
        for lo in found.values():
            created = datetime.fromisoformat(lo.created_at)
            lived = (datetime.fromisoformat(lo.expires_at) - created).total_seconds()
            assert lived == pytest.approx(600 + 3600 + 120 + kit.EXPIRY_GRACE_S, abs=1)
            later = created + timedelta(seconds=lived + 1)
            assert any(
                o.leftover.env_id == lo.env_id for o in reaper.find_orphans([pool.inner], now=later)
            )
        cold = [run_rollout(pool.inner, workloads.build("T0")) for _ in range(3)]
        warm = [run_rollout(pool, workloads.build("T0")) for _ in range(3)]
        assert all(r.ok for r in cold + warm), [r.run["error_message"] for r in cold + warm]
        ttfc = sorted(r.run["time_to_first_command_s"] for r in cold)
        claims = sorted(r.run["claim_s"] for r in warm)
        assert claims[1] <= ttfc[1] / 20  # the goal of issue 14, medians of three
        for record in warm:
            made = json.loads(record.run["provenance"])["pool"]
            assert made["create_s"] > 0 and made["orchestration_s"] > 0 and made["ready_s"] > 0
            assert made["memory_bytes"] > 0  # what it held while it waited
            assert record.run["cleanup_ok"] == 1  # destroyed by its rollout
        wait_for(lambda: pool.counts()["ready"] == 2, "the pool full again")
        assert len(pool.made) == 2 + 3  # filled, then one refill per claim: no more
    finally:
        pool.close()
    assert _left_in_docker() == ""


def test_a_burst_on_a_docker_pool_waits_in_order_for_its_refills(runner_image: str) -> None:
    """Six claims at once on two ready containers refilled two at a time: two are handed over
    at once, the other four wait for real refills, every one gets a container of its own."""
    pool = _docker_pool(2, 2)
    try:
        pool.prepare(lambda _: None)
        barrier = threading.Barrier(6)

        def claim(i: int) -> Environment:
            barrier.wait()
            return pool.claim(f"burst-{i}", lifetime_s=3720, timeout_s=120)

        threads = [_in_thread(claim, i) for i in range(6)]
        for i, (thread, _) in enumerate(threads):
            joined(thread, f"claim burst-{i}", timeout_s=180)
        envs = [out[0] for _, out in threads]
        assert all(isinstance(e, Environment) for e in envs), envs
        assert len({e.env_id for e in envs}) == 6
        waited = sorted(e.pool["waited_s"] for e in envs)
        refill = min(m["time_to_first_command_s"] for m in pool.made[2:])
        assert waited[1] < refill / 20 and waited[2] > refill / 2  # 2 ready, 4 wait a refill
        for env in envs:
            pool.destroy(env, 60)
    finally:
        pool.close()
    assert _left_in_docker() == ""


def test_cli_probe_claims_from_a_configured_pool_and_leaves_nothing(
    runner_image: str, tmp_path: Path
) -> None:
    config = tmp_path / "rtax.toml"
    config.write_text(
        f'[[substrates]]\nname = "{DOCKER_NAME}"\nkind = "docker"\n'
        'pool = { size = 2, refill_concurrency = 1, max_idle = "5m" }\n'
    )
    db = tmp_path / "p.db"
    done = subprocess.run(
        [sys.executable, "-m", "rtax", "probe", "--substrate", DOCKER_NAME, "--config",
         str(config), "--repeat", "3", "--db", str(db)],
        capture_output=True, text=True, timeout=deadline_s(600),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "claim" in done.stdout and "create" not in done.stdout  # the summary's phases
    with Store(db, create=False) as store:
        runs = store.runs.read()
    assert list(runs["launch_type"]) == ["warm"] * 3 and list(runs["status"]) == ["ok"] * 3
    assert runs["create_s"].isna().all() and (runs["claim_s"] > 0).all()
    assert (runs["time_to_first_command_s"] == runs["claim_s"] + runs["ready_s"]).all()
    assert _left_in_docker() == ""  # the pool went with the command
