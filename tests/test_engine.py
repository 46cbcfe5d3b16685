"""The engines (docs/ray.md) without a cluster: the ``[engine]`` table checked one line per
mistake; the local engine stamps every record with its vantage and engine under the run id
chosen before dispatch; the Ray engine's own decisions (a secret in a spec, a vantage with no
node, a lost task, a rollout given up on) against a stand-in for the ``ray`` module, whose
tasks end when the test says. The real cluster is tests/test_ray.py's."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import ray.exceptions

from polling import DEADLINE_S, wait_for
from rtax.core import redaction
from rtax.rollouts.engines.base import RolloutSpec, settle
from rtax.rollouts.engines.local import LocalEngine
from rtax.rollouts.engines.ray import RayEngine
from rtax.service.scheduler import Scheduler
from rtax.settings import ConfigError, SubstrateConfig, config
from rtax.settings.engine import EngineSettings
from rtax.store.database import Store
from rtax.substrates.local import LocalSubstrate

LOCAL = SubstrateConfig("local", "local")


def _load(tmp_path: Path, text: str) -> config.Config:
    file = tmp_path / "rtax.toml"
    file.write_text(text + '\n[[substrates]]\nname = "local"\nkind = "local"\n')
    return config.load(file)


def _problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    return [p.split(": ", 1)[1] for p in caught.value.problems]


def test_the_engine_table_is_checked_one_line_per_mistake(tmp_path: Path) -> None:
    assert _load(tmp_path, "").engine == EngineSettings()  # local, vantage "local"
    ray_conf = _load(tmp_path, '[engine]\nkind = "ray"\naddress = "auto"\nvantages = ["eu"]\n')
    assert (ray_conf.engine.kind, ray_conf.engine.vantages) == ("ray", ("eu",))
    assert ray_conf.engine.label == "rtax.io/vantage"
    problems = _problems(
        tmp_path,
        '[engine]\nkind = "ray"\nvantages = ["eu", "eu", "no spaces"]\nlabel = "ray.io/x"\n'
        'vantage = "here"\nbogus = 1\n',
    )
    assert any(p.startswith("engine.address:") for p in problems)
    assert any(p.startswith("engine.vantages:") for p in problems)
    assert any(p.startswith("engine.label:") for p in problems)
    assert any(p.startswith("engine.vantage:") for p in problems)  # a node's is its label
    assert any(p.startswith("engine.bogus:") for p in problems)
    assert _problems(tmp_path, 'engine = "ray"\n') == [
        'engine.address: a ray engine needs the cluster\'s address ("auto" finds it)'
    ]


def test_vantages_need_ray_and_ray_reaches_no_emulation(tmp_path: Path) -> None:
    plan = '[[plans]]\nname = "p"\nsubstrates = ["local"]\ntier = "T0"\nvantages = ["eu"]\n'
    assert _problems(tmp_path, plan) == ['plans.p.vantages: needs engine = "ray" (docs/ray.md)']
    emulated = '[[substrates]]\nname = "k8s"\nkind = "kubernetes"\nemulate = true\n'
    ray_engine = '[engine]\nkind = "ray"\naddress = "auto"\n'
    (problem,) = _problems(tmp_path, emulated + ray_engine)
    assert problem.startswith("substrates.k8s.emulate:")


def test_the_local_engine_stamps_vantage_and_engine_under_the_chosen_run_id(
    tmp_path: Path, attrs_fixture
) -> None:
    conf = _load(tmp_path, '[engine]\nvantage = "lab-3"\n[metrics]\nenabled = false\n')

    def factory(entry: SubstrateConfig, overrides: dict) -> LocalSubstrate:
        return LocalSubstrate(
            name=entry.name, root=tmp_path / "envs", template=attrs_fixture.template
        )

    scheduler = Scheduler(conf, factory=factory, fixture=attrs_fixture)
    engine = scheduler.engine
    assert isinstance(engine, LocalEngine)
    spec = RolloutSpec(conf.substrates["local"], "T0", run_id="chosen-before-dispatch")
    record = engine.submit(spec).result(timeout=DEADLINE_S)
    assert record is not None and record.ok
    assert (record.run["run_id"], record.run["vantage"]) == ("chosen-before-dispatch", "lab-3")
    assert json.loads(record.run["provenance"])["engine"] == {"kind": "local", "vantage": "lab-3"}
    scheduler.save(record)
    scheduler.save(record)  # a second outcome of the same run id is not a second row
    with Store(conf.database) as store:
        runs = store.runs.read()
    assert list(runs["run_id"]) == ["chosen-before-dispatch"]
    assert list(runs["vantage"]) == ["lab-3"]


def test_a_future_settles_once_the_first_outcome_wins() -> None:
    future: Future[Any] = Future()
    assert settle(future, "first") and not settle(future, "second")
    assert future.result() == "first"


# -- the Ray engine against a stand-in ----------------------------------------------------------


class _Ref:
    """A task's result: ends when the test (or a cancel) says."""

    def __init__(self) -> None:
        self.done: Future[Any] = Future()

    def future(self) -> Future[Any]:
        return self.done


class _Ray:
    """What `RayEngine` uses of the ``ray`` module; its tasks never run anything."""

    exceptions = ray.exceptions

    def __init__(self, vantages: list[str]) -> None:
        self.vantages = vantages
        self.submitted: list[tuple[dict[str, Any], tuple[Any, ...], _Ref]] = []
        self.on_cancel = lambda ref: None

    def is_initialized(self) -> bool:
        return True

    def remote(self, **_: Any) -> Any:
        fake = self

        class _Fn:
            def __init__(self, fn: Any) -> None:
                self.options_ = {}

            def options(self, **options: Any) -> Any:
                self.options_ = options
                return self

            def remote(self, *args: Any) -> _Ref:
                ref = _Ref()
                fake.submitted.append((self.options_, args, ref))
                return ref

        return _Fn

    def nodes(self) -> list[dict[str, Any]]:
        return [
            {
                "Alive": True,
                "NodeID": f"n-{v}",
                "NodeManagerHostname": "h",
                "Labels": {"rtax.io/vantage": v},
            }
            for v in self.vantages
        ]

    def get(self, ref: _Ref, timeout: float | None = None) -> Any:
        return ref.done.result(timeout)

    def cancel(self, ref: _Ref) -> None:
        if not ref.done.done():
            ref.done.set_exception(ray.exceptions.TaskCancelledError())
        self.on_cancel(ref)


@pytest.fixture
def ray_engine():
    made: list[RayEngine] = []

    def make(vantages: list[str]) -> tuple[RayEngine, _Ray]:
        fake = _Ray(vantages)
        settings = EngineSettings("ray", "auto", vantages=tuple(vantages))
        engine = RayEngine(settings, threading.Event(), ray=fake)
        engine.start()
        made.append(engine)
        return engine, fake

    yield make
    for engine in made:
        engine.close()


def test_a_spec_carrying_a_secret_is_refused_before_dispatch(ray_engine) -> None:
    engine, fake = ray_engine(["eu"])
    redaction.register("tok-3f9a-very-secret")
    leaky = SubstrateConfig("d", "daytona", {"api_key": "tok-3f9a-very-secret"})
    record = engine.submit(RolloutSpec(leaky, "T0", vantage="eu")).result(DEADLINE_S)
    assert record is not None and record.run["error_class"] == "harness_error"
    assert fake.submitted == []  # nothing went to the cluster
    named = SubstrateConfig("d", "daytona", {"api_key_env": "DAYTONA_API_KEY"})
    engine.submit(RolloutSpec(named, "T0", vantage="eu"))
    ((options, args, _),) = fake.submitted
    assert options == {"label_selector": {"rtax.io/vantage": "eu"}}
    assert args[0].substrate.params == {"api_key_env": "DAYTONA_API_KEY"}  # a name, no value


def test_no_node_for_a_vantage_and_a_lost_task_are_engine_errors(ray_engine) -> None:
    engine, fake = ray_engine(["eu"])
    nowhere = engine.submit(RolloutSpec(LOCAL, "T0", vantage="mars")).result(DEADLINE_S)
    assert nowhere.run["error_class"] == "engine_error" and nowhere.run["vantage"] == "mars"
    assert "rtax.io/vantage=mars" in nowhere.run["error_message"]
    assert fake.submitted == []
    spread = engine.submit(RolloutSpec(LOCAL, "T0"))
    ((options, _, ref),) = fake.submitted
    assert options == {"scheduling_strategy": "SPREAD"}
    ref.done.set_exception(ray.exceptions.WorkerCrashedError())
    lost = spread.result(DEADLINE_S)
    assert lost.run["error_class"] == "engine_error"
    assert lost.run["error_message"].startswith("WorkerCrashedError")
    assert json.loads(lost.run["provenance"])["engine"]["kind"] == "ray"


def test_a_rollout_given_up_on_keeps_its_engine_error_not_its_cancelled_end(ray_engine) -> None:
    """The watchdog gives up on a rollout whose vantage lost its last node and cancels its
    task; the cancelled task's own end (TaskCancelledError, what a stop also gives) must not
    become its outcome, or the rollout is silently dropped as if the scheduler were stopping.
    (The stand-in's cancel waits until the rollout's future is settled, so that whichever
    outcome is given first wins deterministically.)"""
    engine, fake = ray_engine(["eu", "us"])
    holder: dict[str, Future[Any]] = {}
    fake.on_cancel = lambda ref: wait_for(lambda: holder["f"].done(), "an outcome")
    holder["f"] = future = engine.submit(RolloutSpec(LOCAL, "T0", vantage="us"))
    assert len(fake.submitted) == 1
    fake.vantages = ["eu"]  # the us node is lost before its task ends
    record = future.result(DEADLINE_S)
    assert record is not None, "the lost rollout was dropped instead of kept"
    assert record.run["error_class"] == "engine_error"
    assert "rtax.io/vantage=us" in record.run["error_message"]


def test_a_stop_cancels_what_is_in_flight_and_records_nothing(ray_engine) -> None:
    engine, fake = ray_engine(["eu"])
    future = engine.submit(RolloutSpec(LOCAL, "T0", vantage="eu"))
    started = time.monotonic()
    engine.cancel.set()
    assert future.result(DEADLINE_S) is None
    assert time.monotonic() - started < 5
    assert fake.submitted[0][2].done.exception() is not None  # its task was cancelled
