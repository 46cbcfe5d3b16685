"""The substrate contract: the tests every substrate passes, through the probe runner.

A substrate's test module subclasses `SubstrateContract` and provides two fixtures:
``substrate`` (a ready-to-use instance) and ``repo_source`` (where T2 clones from, reachable
from inside that substrate's environments). Everything here goes through `run_rollout`, the one
path that produces samples, and checks the measurement model (docs/measurement.md).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest

from polling import DEADLINE_S
from rtax.core import workloads
from rtax.core.options import RolloutOptions
from rtax.core.record import PHASES, START_PHASES, RolloutRecord, phases_of
from rtax.core.workloads import Action, RepoSource, Workload
from rtax.rollouts.rollout import run_rollout
from rtax.store.database import Store
from rtax.substrates import kit, reaper
from rtax.substrates.base import Substrate


def assert_phases_add_up(record: RolloutRecord) -> None:
    """Phases are consecutive and exclusive: their sum is the wall time, up to the harness's
    own cost (overhead), which must stay within 1 ms + 1% of the wall time."""
    run = record.run
    phases = [run[f"{p}_s"] for p in PHASES if run[f"{p}_s"] is not None]
    assert all(p >= 0 for p in phases)
    assert run["overhead_s"] >= 0
    assert run["overhead_s"] <= 0.001 + 0.01 * run["wall_s"], run
    assert sum(phases) + run["overhead_s"] == pytest.approx(run["wall_s"], abs=1e-9)
    action_rows = [a for a in record.actions if a["phase"] == "action"]
    assert sum(a["latency_s"] for a in action_rows) == pytest.approx(
        run["actions_s"] or 0.0, abs=1e-9
    )
    if run["status"] == "ok":
        own = START_PHASES[run["launch_type"]]  # e.g. claim, then its first `true`
        for phase in PHASES:
            if phase not in phases_of(run["launch_type"]):
                assert run[f"{phase}_s"] is None, (phase, run)
        ttfc = sum(run[f"{p}_s"] for p in own)
        assert run["time_to_first_command_s"] == pytest.approx(ttfc)
        assert run["time_to_first_command_s"] <= run["episode_s"] <= run["wall_s"]


def coverage_problems(
    required: list[str], outcomes: dict[str, list[str]], deselected: list[str]
) -> list[str]:
    """Why the contract coverage falls short of `required` kinds, one line each (none: it holds).

    `outcomes` maps a kind to the outcome of each of its contract tests ("passed", "skipped",
    "failed"); `deselected` lists contract tests that never ran. Used by conftest under
    ``RTAX_REQUIRE_CONTRACT`` so that CI can't pass with a kind silently left out."""
    problems = []
    if required and deselected:
        problems.append(f"{len(deselected)} contract tests deselected, e.g. {deselected[0]}")
    for kind in required:
        seen = outcomes.get(kind, [])
        if not seen:
            problems.append(f"{kind}: its contract suite did not run")
        elif any(o != "passed" for o in seen):
            bad = sorted({o for o in seen if o != "passed"})
            problems.append(f"{kind}: contract tests {', '.join(bad)}")
    return problems


def assert_clean(substrate: Substrate, record: RolloutRecord) -> None:
    assert record.run["cleanup_ok"] == 1
    assert record.run["cleanup_s"] is not None
    assert [lo for lo in substrate.leftovers() if lo.run_id == record.run["run_id"]] == []


class SubstrateContract:
    """Subclass and provide the `substrate` and `repo_source` fixtures."""

    def rollout(self, substrate: Substrate, workload: Workload, **kw) -> RolloutRecord:
        record = run_rollout(substrate, workload, options=RolloutOptions(**kw))
        assert_phases_add_up(record)
        assert_clean(substrate, record)
        return record

    def test_t0(self, substrate: Substrate, store: Store) -> None:
        record = self.rollout(substrate, workloads.build("T0"))
        assert record.ok, record.run
        assert record.run["fidelity"] == substrate.fidelity
        # every launch type runs its first `true` in the rollout's ready phase, so a warm
        # time to first command includes a command as a cold one does
        # (a restore's only set-up is its state check: the snapshot holds the rest)
        check = ["setup"] if record.run["launch_type"] == "restore" else []
        assert [a["phase"] for a in record.actions] == ["ready", *check, "action"]
        store.save_rollout(record)
        assert store.runs.count() == 1
        assert store.runs.count_actions() == len(record.actions)

    def test_t1(self, substrate: Substrate) -> None:
        record = self.rollout(substrate, workloads.build("T1"))
        assert record.ok, record.run
        assert [a["category"] for a in record.actions if a["phase"] == "action"] == [
            "inspect",
            "inspect",
            "inspect",
        ]

    def test_t2_patch_turns_failing_test_into_passing(
        self, substrate: Substrate, repo_source: RepoSource
    ) -> None:
        record = self.rollout(substrate, workloads.build("T2", source=repo_source))
        assert record.ok, record.run
        tests = [a for a in record.actions if a["category"] == "test"]
        assert [t["exit_code"] for t in tests] == [1, 0]
        assert record.run["setup_s"] > 0

    def test_t2_with_unchanged_test_is_workload_failed(
        self, substrate: Substrate, repo_source: RepoSource
    ) -> None:
        # A "fix" that changes nothing: the test keeps failing, so the rollout must fail.
        empty = RepoSource(
            repo_source.url,
            repo_source.commit,
            "diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+x\n",
            repo_source.failing_test,
        )
        record = self.rollout(substrate, workloads.build("T2", source=empty))
        assert record.run["status"] == "failed"
        assert record.run["error_class"] == "workload_failed"
        assert record.run["episode_s"] is None

    def test_trajectory_of_10_stored_one_by_one(
        self, substrate: Substrate, repo_source: RepoSource, store: Store
    ) -> None:
        workload = workloads.build("T2", steps=10, seed=3, source=repo_source)
        record = self.rollout(substrate, workload)
        assert record.ok, record.run
        store.save_rollout(record)
        actions = store.runs.actions(run_id=record.run["run_id"], phase="action")
        assert len(actions) == 10 == record.run["n_actions_done"]
        assert list(actions["command"]) == [a.command for a in workload.actions]
        assert (actions["latency_s"] > 0).all()

    def test_every_action_template_runs(
        self, substrate: Substrate, repo_source: RepoSource
    ) -> None:
        """Every form of action the workloads can produce (`workloads.templates`: each inspect,
        exec, edit and test form, T0/T1/T2's fixed actions, after T2's clone) runs once in one
        environment, in order, and passes its own check: a substrate that measures a workload
        must be able to run all of it (gVisor's runsc once failed `ls -la` with EINVAL)."""
        templates = workloads.templates(repo_source)
        workload = Workload(
            "T2",
            0,
            0,
            setup=tuple(a for a in templates if a.category == "setup"),
            actions=tuple(a for a in templates if a.category != "setup"),
        )
        record = self.rollout(substrate, workload)
        failed = [a for a in record.actions if a.get("ok") == 0]
        assert record.ok, (record.run["error_message"], failed)
        ran = [a["command"] for a in record.actions if a["phase"] in ("setup", "action")]
        if record.run["launch_type"] == "restore":  # the clone is in the snapshot
            assert [a["category"] for a in record.actions if a["phase"] == "setup"] == ["check"]
            ran = ran[1:]
            templates = [a for a in templates if a.category != "setup"]
        assert ran == [a.command for a in templates]

    def test_hung_command_is_killed_at_its_timeout(self, substrate: Substrate) -> None:
        hang = Workload("T0", 0, 0, actions=(Action("exec", "sleep 30", timeout_s=0.5),))
        record = self.rollout(substrate, hang)
        assert record.run["status"] == "failed"
        assert record.run["error_class"] == "action_timeout"
        latency = record.actions[-1]["latency_s"]
        assert 0.5 <= latency < 10

    def test_failed_action_still_cleans_up(self, substrate: Substrate) -> None:
        failing = Workload(
            "T0", 0, 0, actions=(Action("exec", "exit 3"), Action("exec", "echo never"))
        )
        record = self.rollout(substrate, failing)
        assert record.run["error_class"] == "workload_failed"
        assert record.actions[-1]["exit_code"] == 3
        assert record.run["n_actions_done"] == 0
        assert len([a for a in record.actions if a["phase"] == "action"]) == 1

    def test_leftovers_carry_the_label(self, substrate: Substrate) -> None:
        """Found by its label, with its owner and the expiry its lifetime gave it (the
        reaper's rules read them: docs/adding-a-substrate.md#leftovers)."""
        env = substrate.create("contract-leftover", lifetime_s=600)
        try:
            substrate.wait_running(env, DEADLINE_S)
            found = [lo for lo in substrate.leftovers() if lo.run_id == "contract-leftover"]
            assert len(found) == 1
            assert found[0].owner and found[0].created_at and found[0].expires_at
            created = datetime.fromisoformat(found[0].created_at)
            lived = datetime.fromisoformat(found[0].expires_at) - created
            assert lived.total_seconds() == pytest.approx(600 + kit.EXPIRY_GRACE_S, abs=1)

            def orphaned(**when: datetime) -> list[reaper.Orphan]:
                found = reaper.find_orphans([substrate], **when)
                return [o for o in found if o.leftover.run_id == "contract-leftover"]

            assert orphaned() == []  # within its expiry, its owner alive: a rollout may use it
            (expired,) = orphaned(now=created + timedelta(seconds=lived.total_seconds() + 1))
            assert expired.expired  # past it, whoever owns it (this live process)
        finally:
            substrate.destroy(env, 60)
        assert [lo for lo in substrate.leftovers() if lo.run_id == "contract-leftover"] == []

    def test_planted_leftover_is_found_and_reaped(
        self, substrate: Substrate, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An environment left behind by a crashed run: it carries this process as its owner,
        so the reaper spares it while we live, and removes it once the owner counts as gone
        (the only thing faked here is that liveness check)."""
        env = substrate.create("contract-planted")
        try:
            substrate.wait_running(env, DEADLINE_S)
            (planted,) = [lo for lo in substrate.leftovers() if lo.run_id == "contract-planted"]
            assert planted.owner == f"{kit.owner_host()}:{os.getpid()}"
            assert (
                reaper.why_orphan(planted, older_than_s=None, now=datetime.now(UTC)) is None
            )  # a live run's environment is spared
            monkeypatch.setattr(reaper, "pid_alive", lambda pid: pid != os.getpid())
            reaped = reaper.reap([substrate])
            assert [o.leftover.run_id for o in reaped].count("contract-planted") == 1
            left = [lo for lo in substrate.leftovers() if lo.run_id == "contract-planted"]
            assert left == []
        except BaseException:
            substrate.destroy(env, 60)
            raise

    def test_commands_report_exit_code_and_streams(self, substrate: Substrate) -> None:
        env = substrate.create("contract-streams")
        try:
            substrate.wait_running(env, DEADLINE_S)
            result = substrate.run(env, "echo out; echo err >&2; exit 7", 30)
            assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
            assert result.latency_s > 0
        finally:
            substrate.destroy(env, 60)

    def test_describe_is_provenance(self, substrate: Substrate) -> None:
        described = substrate.describe()
        assert described["kind"] == substrate.kind
        assert described["endpoint"]

    def test_speaks_the_whole_protocol(self, substrate: Substrate) -> None:
        """Every attribute and method the callers use is there (the runner, the scheduler and
        the reaper read `mode` and `host_address` directly, never with a default)."""
        assert isinstance(substrate, Substrate)
        assert substrate.mode in ("exec", "session")
        assert substrate.host_address is None or isinstance(substrate.host_address, str)
