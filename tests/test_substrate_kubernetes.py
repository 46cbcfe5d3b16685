"""The kubernetes substrate through the official client against the Kubernetes API emulation:
the whole contract, the failures the issue names (injected into the emulation and classified in
the stored row), rate limiting, the exec protocols, leftovers and cleanup, and credentials."""

from __future__ import annotations

import json
from collections.abc import Iterator

import docker.errors
import kubernetes
import pytest
import websocket

from contract import SubstrateContract, assert_clean, assert_phases_add_up
from polling import DEADLINE_S, wait_for
from rtax.core import workloads
from rtax.core.failures import CreateFailed, ExecError, SubstrateError
from rtax.core.options import RolloutOptions
from rtax.core.workloads import RepoSource
from rtax.emulation.kubernetes import KubernetesEmulation
from rtax.rollouts.rollout import run_rollout
from rtax.store.database import Store
from rtax.substrates.base import clock, require_host_address
from rtax.substrates.kubernetes import KubernetesSubstrate


@pytest.fixture(scope="module")
def emulation(runner_image: str) -> Iterator[KubernetesEmulation]:
    with KubernetesEmulation(image=runner_image) as emu:
        yield emu


@pytest.fixture(autouse=True)
def _no_faults_left(request) -> Iterator[None]:
    yield
    if "emulation" in request.fixturenames:
        request.getfixturevalue("emulation").faults.clear()


@pytest.fixture
def repo_source(docker_repo_source: RepoSource) -> RepoSource:
    return docker_repo_source


def _sub(emulation: KubernetesEmulation, **overrides) -> KubernetesSubstrate:
    return KubernetesSubstrate(**{**emulation.substrate_params(), **overrides})


class TestKubernetesContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, emulation: KubernetesEmulation) -> KubernetesSubstrate:
        return _sub(emulation)


@pytest.fixture
def k8s(emulation: KubernetesEmulation) -> KubernetesSubstrate:
    return _sub(emulation, rate_limit_base_s=0.01, rate_limit_max_s=0.05)


def _posts(emulation: KubernetesEmulation) -> int:
    return sum(1 for m, p in emulation.requests if m == "POST" and p.endswith("/pods"))


def _exists(docker_api, cid: str) -> bool:
    try:
        docker_api.inspect_container(cid)
    except docker.errors.NotFound:
        return False
    return True


def _gone(docker_api, cid: str | None) -> None:
    """Wait (polling, with the deadline) until the container `cid` no longer exists."""
    if cid is not None:
        wait_for(lambda: not _exists(docker_api, cid), f"container {cid[:12]} to be removed")


def _stored(store: Store, record) -> dict:
    if record.run["actions_s"] is not None:
        assert_phases_add_up(record)
    store.save_rollout(record)
    runs = store.runs.read()
    row = runs[runs["run_id"] == record.run["run_id"]].iloc[0]
    return row.to_dict()


# -- orchestration, milestones, events ------------------------------------------------------------


def test_milestones_follow_the_kubelet(
    k8s: KubernetesSubstrate, emulation: KubernetesEmulation, store: Store
) -> None:
    record = run_rollout(k8s, workloads.build("T0"))
    assert record.ok, record.run
    row = _stored(store, record)
    names = [m["name"] for m in json.loads(row["milestones"])]
    for expected in (
        "created",
        "scheduled",
        "initialized",
        "containers_ready",
        "pod_ready",
        "running",
    ):
        assert expected in names
    assert "ready" not in names  # a phase's name, never a milestone's
    assert names.index("scheduled") < names.index("running") < names.index("first_command")
    assert {"image_pulled", "container_started"} <= set(names)
    assert names[-1] == "removed"
    provenance = json.loads(row["provenance"])["substrate"]
    assert provenance["server_version"].startswith("v1.")
    # The kubelet's events outlive the pod, as in a real cluster.
    pod = f"rtax-{record.run['run_id']}"
    events = k8s.api.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={pod}"
    ).items
    reasons = [e.reason for e in events]
    assert reasons[:4] == ["Scheduled", "Pulled", "Created", "Started"]
    assert all(e.involved_object.kind == "Pod" for e in events)


def test_missing_image_is_create_failed_and_kept(
    emulation: KubernetesEmulation, store: Store
) -> None:
    sub = _sub(emulation, image="rtax-no-such-image:none")
    record = run_rollout(sub, workloads.build("T0"))
    row = _stored(store, record)
    assert (row["status"], row["error_class"]) == ("failed", "create_failed")
    assert "ImagePullBackOff" in row["error_message"]
    assert row["cleanup_ok"] == 1
    assert_clean(sub, record)


@pytest.mark.parametrize("status", [403, 422])
def test_create_refused_is_create_failed(
    k8s: KubernetesSubstrate, emulation: KubernetesEmulation, store: Store, status: int
) -> None:
    emulation.faults.fail("create", status, message="pods is forbidden: no")
    record = run_rollout(k8s, workloads.build("T0"))
    row = _stored(store, record)
    assert (row["status"], row["error_class"]) == ("failed", "create_failed")
    assert f"HTTP {status}" in row["error_message"] and "forbidden" in row["error_message"]
    assert row["cleanup_ok"] is None  # nothing was created


def test_rate_limit_retried_then_succeeds(emulation: KubernetesEmulation) -> None:
    # No event watch: the injected watch 429 must reach the pod watch, not the events thread.
    sub = _sub(emulation, rate_limit_base_s=0.01, rate_limit_max_s=0.05, watch_events=False)
    before = list(emulation.requests)
    emulation.faults.fail("create", 429, times=2, retry_after=0)
    emulation.faults.fail("exec", 429, times=1, retry_after=0)
    emulation.faults.fail("watch", 429, times=1, retry_after=0)
    record = run_rollout(sub, workloads.build("T0"))
    assert record.ok, record.run
    made = emulation.requests[len(before) :]
    pod = f"/pods/rtax-{record.run['run_id']}"
    assert sum(1 for m, p in made if m == "POST" and p.endswith("/pods")) == 3
    execs = [i for i, (_, p) in enumerate(made) if p.endswith(pod + "/exec")]
    assert len(execs) == 3  # ready, echo, and one retry
    starting = made[: execs[0]]  # the refused pod watch, then its retry
    assert sum(1 for m, p in starting if m == "GET" and p.endswith("/pods")) == 2
    # Every wait is in the sample's provenance, with the policy that chose it.
    provenance = json.loads(record.run["provenance"])
    waits = [(w["call"], w["attempt"], w["retry_after_s"]) for w in provenance["rate_limit_waits"]]
    assert waits == [
        ("pod create", 1, 0.0),
        ("pod create", 2, 0.0),
        ("pod watch", 1, 0.0),
        ("exec", 1, None),  # a refused upgrade's headers are not kept
    ]
    policy = provenance["substrate"]["rate_limit"]
    assert (policy["attempts"], policy["base_s"], policy["max_s"]) == (6, 0.01, 0.05)


def test_samples_from_the_emulation_are_never_labelled_real(
    emulation: KubernetesEmulation,
) -> None:
    sub = _sub(emulation, fidelity="real")
    assert sub.describe()["fidelity"] == "emulated" == sub.fidelity


def test_persistent_rate_limit_is_rate_limited(
    emulation: KubernetesEmulation, store: Store
) -> None:
    sub = _sub(emulation, rate_limit_attempts=3, rate_limit_base_s=0.01, rate_limit_max_s=0.05)
    before = _posts(emulation)
    emulation.faults.fail("create", 429, times=100, retry_after=1)
    t0 = clock()
    record = run_rollout(sub, workloads.build("T0"))
    row = _stored(store, record)
    assert (row["status"], row["error_class"]) == ("failed", "rate_limited")
    assert _posts(emulation) - before == 3
    assert clock() - t0 < 5  # Retry-After is the wait only up to rate_limit_max_s


def test_create_answer_lost_is_create_timeout_and_nothing_left(
    emulation: KubernetesEmulation, store: Store
) -> None:
    sub = _sub(emulation, create_timeout_s=1)
    emulation.faults.delay("create", 3)
    record = run_rollout(sub, workloads.build("T0"))
    row = _stored(store, record)
    assert row["error_class"] == "create_timeout"
    wait_for(
        lambda: not [lo for lo in sub.leftovers() if lo.run_id == record.run["run_id"]],
        "the pod whose answer was lost to be deleted",
    )


def test_a_500_after_the_pod_was_made_leaves_no_pod(
    k8s: KubernetesSubstrate, emulation: KubernetesEmulation
) -> None:
    """The API server wrote the pod, then answered 500: the create fails and the pod is
    deleted by name, verified gone before the error leaves the substrate."""
    emulation.faults.fail("create", 500, message="etcdserver: request timed out", accepted=True)
    with pytest.raises(CreateFailed, match="HTTP 500"):
        k8s.create("pod-500-accepted")
    made = [p for m, p in emulation.requests if m == "POST" and p.endswith("/pods")]
    assert made, "the POST was sent"
    assert [lo for lo in k8s.leftovers() if lo.run_id == "pod-500-accepted"] == []


def test_a_create_refused_as_already_existing_leaves_the_other_pod_alone(
    k8s: KubernetesSubstrate,
) -> None:
    """A 409 names a pod that is not this request's: the failed create must not delete it."""
    first = k8s.create("pod-same-name")
    try:
        with pytest.raises(CreateFailed, match="HTTP 409"):
            k8s.create("pod-same-name")
        assert [lo.env_id for lo in k8s.leftovers() if lo.run_id == "pod-same-name"] == [
            first.env_id
        ]
    finally:
        k8s.destroy(first, 60)


def test_pod_held_pending_is_ready_timeout_kept_and_nothing_left(
    emulation: KubernetesEmulation, store: Store
) -> None:
    sub = _sub(emulation)
    emulation.faults.fail("schedule", times=None)  # held until cleared
    try:
        t0 = clock()
        record = run_rollout(
            sub, workloads.build("T0"), options=RolloutOptions(running_timeout_s=1)
        )
        assert clock() - t0 < 15
    finally:
        emulation.faults.clear()
    row = _stored(store, record)
    assert (row["status"], row["error_class"]) == ("failed", "ready_timeout")
    assert "Unschedulable" in row["error_message"] or "PodScheduled" in row["error_message"]
    assert row["cleanup_ok"] == 1
    assert_clean(sub, record)
    assert emulation.container_of(f"rtax-{record.run['run_id']}") is None  # never made


def test_delete_refused_is_cleanup_failed_kept_and_then_reaped(
    emulation: KubernetesEmulation, store: Store, docker_api
) -> None:
    sub = _sub(emulation)
    emulation.faults.fail("delete", 500, message="etcdserver: request timed out")
    record = run_rollout(sub, workloads.build("T0"))
    row = _stored(store, record)
    assert (row["status"], row["error_class"]) == ("failed", "cleanup_failed")
    assert row["cleanup_ok"] == 0 and "HTTP 500" in row["error_message"]
    assert row["time_to_first_command_s"] is not None  # the rollout itself went through
    left = [lo for lo in sub.leftovers() if lo.run_id == record.run["run_id"]]
    assert len(left) == 1  # the pod outlived the failed cleanup: the reaper's job
    cid = emulation.container_of(left[0].env_id)
    sub.destroy(left[0], 120)
    assert record.run["run_id"] not in [lo.run_id for lo in sub.leftovers()]
    _gone(docker_api, cid)


def test_exec_forbidden_fails_the_ready_phase_at_once(
    emulation: KubernetesEmulation, store: Store
) -> None:
    sub = _sub(emulation)
    emulation.faults.fail("exec", 403, times=100, message="pods/exec is forbidden: no")
    t0 = clock()
    record = run_rollout(sub, workloads.build("T0"), options=RolloutOptions(ready_timeout_s=60))
    assert clock() - t0 < 20  # not after the ready timeout
    emulation.faults.clear()
    row = _stored(store, record)
    assert (row["status"], row["error_class"]) == ("failed", "exec_error")
    assert "403" in row["error_message"]
    assert row["cleanup_ok"] == 1
    ready = [a for a in record.actions if a["phase"] == "ready"]
    assert len(ready) == 1 and ready[0]["error_class"] == "exec_error"
    assert_clean(sub, record)


def test_exec_upgrade_never_answered_fails_within_the_budget(
    emulation: KubernetesEmulation,
) -> None:
    sub = _sub(emulation, api_timeout_s=1)
    env = sub.create("exec-silent")
    try:
        sub.wait_running(env, DEADLINE_S)
        emulation.faults.delay("exec", 8)  # the upgrade request is held, never answered
        t0 = clock()
        with pytest.raises(ExecError, match="no answer to the WebSocket upgrade"):
            sub.run(env, "true", 30)
        assert clock() - t0 < 5
        assert sub.run(env, "echo back", 30).stdout == "back\n"  # the next exec is answered
    finally:
        sub.destroy(env, 60)


def test_pod_deleted_under_the_rollout_is_environment_lost(
    k8s: KubernetesSubstrate, emulation: KubernetesEmulation
) -> None:
    class DeleteBefore:
        """Deletes the pod from outside before the second command."""

        def __init__(self, inner: KubernetesSubstrate) -> None:
            self.inner, self.calls = inner, 0
            self.name, self.kind, self.fidelity = inner.name, inner.kind, inner.fidelity

        def __getattr__(self, attr: str):
            return getattr(self.inner, attr)

        def run(self, env, command, timeout_s):
            self.calls += 1
            if self.calls == 2:
                self.inner._delete_and_wait(env.env_id, 60)
            return self.inner.run(env, command, timeout_s)

    record = run_rollout(DeleteBefore(k8s), workloads.build("T1"))
    assert record.run["error_class"] == "environment_lost", record.run["error_message"]
    assert record.run["cleanup_ok"] == 1


# -- exec over WebSocket --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("protocol", "negotiated"),
    [("v4", "v4.channel.k8s.io"), ("v5", "v5.channel.k8s.io"), (None, "v5.channel.k8s.io")],
)
def test_exec_protocols_give_exit_codes_and_separate_streams(
    emulation: KubernetesEmulation, protocol: str | None, negotiated: str
) -> None:
    sub = _sub(emulation, exec_protocol=protocol)
    env = sub.create(f"exec-{protocol}")
    try:
        sub.wait_running(env, DEADLINE_S)
        result = sub.run(env, "echo out; echo err >&2; exit 7", 30)
        assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
        assert emulation.exec_protocols[-1] == negotiated
        assert sub.run(env, "printf 'é\\n'", 30).stdout == "é\n"
        assert sub.run(env, "exit 124", 30).exit_code == 124  # not a timeout: it didn't last
    finally:
        sub.destroy(env, 60)


def test_status_channel_as_the_client_and_a_raw_v4_socket_read_it(
    k8s: KubernetesSubstrate, emulation: KubernetesEmulation
) -> None:
    env = k8s.create("exec-raw")
    try:
        k8s.wait_running(env, DEADLINE_S)
        # the python client's own reading of the status channel (v5, its first choice)
        ws = kubernetes.stream.stream(
            k8s.api.connect_get_namespaced_pod_exec,
            env.env_id,
            "default",
            command=["sh", "-c", "echo hi; echo oops >&2; exit 3"],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
            _preload_content=False,
        )
        ws.run_forever(timeout=DEADLINE_S)
        assert (ws.returncode, ws.read_stdout(), ws.read_stderr()) == (3, "hi\n", "oops\n")
        # websocket-client directly, offering v4 only
        url = emulation.url.replace("http", "ws") + (
            f"/api/v1/namespaces/default/pods/{env.env_id}/exec?command=sh&command=-c"
            "&command=echo%20a%3B%20echo%20b%20%3E%262%3B%20exit%205&stdout=true&stderr=true"
        )
        raw = websocket.create_connection(
            url, subprotocols=["v4.channel.k8s.io"], timeout=DEADLINE_S
        )
        assert raw.subprotocol == "v4.channel.k8s.io"
        frames: dict[int, bytes] = {}
        while True:
            opcode, data = raw.recv_data(control_frame=True)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                break
            frames[data[0]] = frames.get(data[0], b"") + data[1:]
        raw.close()
        assert (frames[1], frames[2]) == (b"a\n", b"b\n")
        status = json.loads(frames[3])
        assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
        assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "5"}]
    finally:
        k8s.destroy(env, 60)


# -- leftovers and cleanup ------------------------------------------------------------------------


def test_planted_leftover_is_listed_and_removed(
    k8s: KubernetesSubstrate, emulation: KubernetesEmulation, docker_api
) -> None:
    env = k8s.create("planted-leftover")
    cid = None
    try:
        k8s.wait_running(env, DEADLINE_S)
        cid = emulation.container_of(env.env_id)
        found = [lo for lo in k8s.leftovers() if lo.run_id == "planted-leftover"]
        assert len(found) == 1
        assert found[0].owner and found[0].created_at and found[0].env_id == env.env_id
        other = _sub(emulation, name="kubernetes-other")
        assert "planted-leftover" not in [lo.run_id for lo in other.leftovers()]
        k8s.destroy(found[0], 120)
        assert [lo for lo in k8s.leftovers() if lo.run_id == "planted-leftover"] == []
    finally:
        if emulation.pod(env.env_id) is not None:
            k8s.destroy(env, 60)
    _gone(docker_api, cid)


def test_destroy_returns_when_the_api_has_no_pod_then_the_kubelet_removes_it(
    k8s: KubernetesSubstrate, emulation: KubernetesEmulation, docker_api
) -> None:
    env = k8s.create("destroy-waits")
    k8s.wait_running(env, DEADLINE_S)
    cid = emulation.container_of(env.env_id)
    assert docker_api.inspect_container(cid)["State"]["Running"]
    k8s.destroy(env, 60)
    # Grace period 0: the API server removed the object with its answer (force deletion) ...
    assert emulation.pod(env.env_id) is None
    with pytest.raises(kubernetes.client.ApiException, match="404"):
        k8s.api.read_namespaced_pod(env.env_id, "default")
    # ... and the kubelet removes the container afterwards, not within cleanup.
    _gone(docker_api, cid)


def test_delete_with_a_grace_period_is_terminating_until_the_container_is_gone(
    k8s: KubernetesSubstrate, emulation: KubernetesEmulation, docker_api
) -> None:
    env = k8s.create("graceful-delete")
    try:
        k8s.wait_running(env, DEADLINE_S)
        cid = emulation.container_of(env.env_id)
        answer = k8s.api.delete_namespaced_pod(env.env_id, "default", grace_period_seconds=30)
        assert answer.metadata.deletion_timestamp is not None
        assert answer.metadata.deletion_grace_period_seconds == 30
        wait_for(  # gone once the kubelet removed it
            lambda: emulation.pod(env.env_id) is None, "the terminating pod to be removed"
        )
        # the object went after its container (the kubelet removes the container first)
        assert cid is None or not _exists(docker_api, cid), "the pod went before its container"
        k8s._delete_and_wait(env.env_id, 10)  # an already deleted pod: nothing to wait for
    finally:
        if emulation.pod(env.env_id) is not None:
            k8s.destroy(env, 60)


# -- the API server's rules -----------------------------------------------------------------------


def test_invalid_labels_are_refused_like_the_api_server(k8s: KubernetesSubstrate) -> None:
    body = {
        "metadata": {"name": "bad-labels", "labels": {"rtax.created_at": "2020-01-01T00:00:00"}},
        "spec": {"containers": [{"name": "main", "image": "x"}]},
    }
    with pytest.raises(kubernetes.client.ApiException) as refused:
        k8s.api.create_namespaced_pod("default", body)
    assert refused.value.status == 422
    status = json.loads(refused.value.body)
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "metadata.labels"
    body["metadata"]["labels"] = {"rtax.owner": "host:123"}
    with pytest.raises(kubernetes.client.ApiException, match="422"):
        k8s.api.create_namespaced_pod("default", body)


def test_watch_from_a_resource_version(
    k8s: KubernetesSubstrate, emulation: KubernetesEmulation
) -> None:
    rv = k8s.api.list_namespaced_pod("default").metadata.resource_version
    env = k8s.create("watch-rv")
    try:
        watch = kubernetes.watch.Watch()
        seen = []
        for event in watch.stream(
            k8s.api.list_namespaced_pod,
            "default",
            field_selector=f"metadata.name={env.env_id}",
            resource_version=rv,
            timeout_seconds=30,
        ):
            seen.append((event["type"], event["object"].status.phase))
            if event["object"].status.phase == "Running":
                watch.stop()
        assert seen[0] == ("ADDED", "Pending") and seen[-1] == ("MODIFIED", "Running")
    finally:
        k8s.destroy(env, 60)


# -- credentials ----------------------------------------------------------------------------------


def test_token_is_sent_and_never_recorded(
    runner_image: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the configuration path: ``token_env`` names the variable, the scheduler's
    factory reads it."""
    from rtax.settings import SubstrateConfig
    from rtax.substrates import build_substrate

    secret = "s3cr3t-token-never-stored"
    with KubernetesEmulation(image=runner_image, token=secret) as emu:
        anonymous = KubernetesSubstrate(**emu.substrate_params())
        assert run_rollout(anonymous, workloads.build("T0")).run["error_class"] == "create_failed"
        monkeypatch.setenv("RTAX_TEST_K8S_TOKEN", secret)
        params = {**emu.substrate_params(), "token_env": "RTAX_TEST_K8S_TOKEN"}
        sub = build_substrate(
            SubstrateConfig(name="k8s-token", kind="kubernetes", params=params), {}
        )
        ok = run_rollout(sub, workloads.build("T0"))
        assert ok.ok, ok.run
        emu.faults.fail("create", 403)
        refused = run_rollout(sub, workloads.build("T0"))
        assert refused.run["error_class"] == "create_failed"
        for record in (ok, refused):
            store.save_rollout(record)
        dumped = json.dumps(
            [store.runs.read().to_dict("records"), store.runs.actions().to_dict("records")],
            default=str,
        )
        assert secret not in dumped and secret not in json.dumps(sub.describe())


def test_unreachable_api_and_missing_host_address_are_one_line_errors() -> None:
    sub = KubernetesSubstrate(host="http://127.0.0.1:9", api_timeout_s=2)
    with pytest.raises(SubstrateError, match="unreachable") as unreachable:
        sub.prepare(lambda message: None)
    assert "\n" not in str(unreachable.value)
    with pytest.raises(SubstrateError, match="host_address"):
        require_host_address(sub)
    with pytest.raises(ValueError, match="fidelity"):
        KubernetesSubstrate(host="http://127.0.0.1:9", fidelity="guessed")
