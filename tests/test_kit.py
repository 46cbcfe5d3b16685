"""rtax.substrates.kit: the retry policy on a fake clock, labels and leftovers, command timeouts."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from rtax.core.failures import CleanupFailed, CommandTimeout, RateLimited, ReadyTimeout
from rtax.substrates import kit
from rtax.substrates.base import LABEL, CommandResult, Environment, Leftover, RateLimitWait, clock


class FakeClock:
    """A clock that moves only when slept on."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


class Throttled(Exception):
    def __init__(self, retry_after: str | None = None) -> None:
        super().__init__("429 Too Many Requests")
        self.headers = {"Retry-After": retry_after} if retry_after is not None else {}


def _refusing(times: int, exc: Exception | None = None):
    """A call refused `times` times, then answering "ok"; counts its calls."""
    calls = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise exc if exc is not None else Throttled()
        return "ok"

    return call, calls


def _policy(clock: FakeClock, **kw) -> kit.RetryPolicy:
    params = {"attempts": 6, "base_s": 0.5, "max_s": 10.0, "deadline_s": 60.0, **kw}
    return kit.RetryPolicy(**params, jitter=lambda w: w, now=clock.now, sleep=clock.sleep)


def _limited(exc: BaseException) -> bool:
    return isinstance(exc, Throttled)


def test_backoff_doubles_from_base_and_every_wait_is_recorded() -> None:
    clock = FakeClock()
    call, calls = _refusing(3)
    waits: list[RateLimitWait] = []
    answer = _policy(clock).call(call, what="pod create", limited=_limited, on_wait=waits.append)
    assert answer == "ok" and len(calls) == 4
    assert clock.sleeps == [0.5, 1.0, 2.0]
    assert waits == [
        RateLimitWait("pod create", 1, 0.5, None),
        RateLimitWait("pod create", 2, 1.0, None),
        RateLimitWait("pod create", 3, 2.0, None),
    ]


def test_backoff_is_capped_at_max() -> None:
    clock = FakeClock()
    call, _ = _refusing(5)
    _policy(clock, max_s=1.5).call(call, what="x", limited=_limited)
    assert clock.sleeps == [0.5, 1.0, 1.5, 1.5, 1.5]


def test_retry_after_is_the_wait_capped_and_never_jittered() -> None:
    clock = FakeClock()
    waits: list[RateLimitWait] = []
    policy = kit.RetryPolicy(
        base_s=0.5, max_s=10.0, jitter=lambda w: w / 4, now=clock.now, sleep=clock.sleep
    )
    for asked in ("3", "0.1", "120"):
        call, _ = _refusing(1, Throttled(asked))
        policy.call(call, what="x", limited=_limited, on_wait=waits.append)
    # 3 s as asked (not 0.5 s of backoff, not jittered), 0.1 s (below the backoff: as asked),
    # 120 s capped at max_s
    assert clock.sleeps == [3.0, 0.1, 10.0]
    assert [w.retry_after_s for w in waits] == [3.0, 0.1, 120.0]


def test_retry_after_as_an_http_date() -> None:
    later = datetime.now(UTC) + timedelta(seconds=30)
    asked = kit.retry_after_header({"Retry-After": format_datetime(later, usegmt=True)})
    assert asked is not None and 25 < asked <= 30
    assert kit.retry_after_header({"retry-after": "7"}) == 7.0
    assert kit.retry_after_header({"Retry-After": "soon"}) is None
    assert kit.retry_after_header(None) is None


def test_jitter_is_applied_to_the_backoff() -> None:
    clock = FakeClock()
    call, _ = _refusing(2)
    kit.RetryPolicy(jitter=lambda w: w * 0.75, now=clock.now, sleep=clock.sleep).call(
        call, what="x", limited=_limited
    )
    assert clock.sleeps == [0.375, 0.75]


def test_default_jitter_stays_within_half_and_whole_backoff() -> None:
    assert all(0.5 <= kit.equal_jitter(1.0) <= 1.0 for _ in range(200))


def test_gives_up_after_the_attempts_with_rate_limited() -> None:
    clock = FakeClock()
    call, calls = _refusing(100)
    with pytest.raises(
        RateLimited, match=r"x: still rate limited after 3 attempts \(1.5 s waited\)"
    ):
        _policy(clock, attempts=3).call(call, what="x", limited=_limited)
    assert len(calls) == 3 and clock.sleeps == [0.5, 1.0]


def test_gives_up_when_the_wait_would_end_past_the_deadline() -> None:
    clock = FakeClock()
    call, calls = _refusing(100)
    # waits 0.5, 1, 2 (t = 3.5); the next, 4 s, would end at 7.5 > 5: give up at once
    with pytest.raises(RateLimited):
        _policy(clock, deadline_s=5.0).call(call, what="x", limited=_limited)
    assert clock.sleeps == [0.5, 1.0, 2.0] and len(calls) == 4
    # the caller's own deadline (a command's timeout) replaces deadline_s
    clock, (call, calls) = FakeClock(), _refusing(100)
    with pytest.raises(RateLimited):
        _policy(clock).call(call, what="x", limited=_limited, deadline=clock.t + 1.0)
    assert clock.sleeps == [0.5] and len(calls) == 2


def test_other_errors_propagate_at_once() -> None:
    clock = FakeClock()
    call, calls = _refusing(1, KeyError("boom"))
    with pytest.raises(KeyError):
        _policy(clock).call(call, what="x", limited=_limited)
    assert len(calls) == 1 and clock.sleeps == []


def test_a_policy_refuses_nonsense_and_describes_itself() -> None:
    with pytest.raises(ValueError):
        kit.RetryPolicy(attempts=0)
    with pytest.raises(ValueError):
        kit.RetryPolicy(deadline_s=0)
    described = kit.RetryPolicy(attempts=4, base_s=0.2, max_s=5, deadline_s=30).describe()
    assert described == {
        "attempts": 4,
        "base_s": 0.2,
        "max_s": 5,
        "deadline_s": 30,
        "retry_after": "used as the wait, capped at max_s",
        "jitter": "equal_jitter",
    }


def test_labels_round_trip_to_a_leftover() -> None:
    made = kit.labels("run-1", "docker-gvisor")
    assert made[LABEL] == "1" and made[f"{LABEL}.substrate"] == "docker-gvisor"
    assert made[f"{LABEL}.owner"] == f"{kit.owner_host()}:{os.getpid()}"
    assert datetime.fromisoformat(made[f"{LABEL}.created_at"]).tzinfo is not None
    assert kit.selector("docker-gvisor").items() <= made.items()
    found = kit.leftover("c0ffee", made, detail="docker-gvisor, running")
    assert isinstance(found, Leftover) and isinstance(found, Environment)
    assert (found.env_id, found.run_id, found.owner, found.detail) == (
        "c0ffee",
        "run-1",
        made[f"{LABEL}.owner"],
        "docker-gvisor, running",
    )
    assert found.created_at == made[f"{LABEL}.created_at"] and found.handle is None


def test_a_leftover_without_a_creation_label_takes_the_apis_own_time() -> None:
    launched = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    for api_time in (launched, launched.timestamp(), launched.isoformat()):
        found = kit.leftover("i-1", {LABEL: "1"}, created_at=api_time)
        assert datetime.fromisoformat(found.created_at) == launched
        assert found.run_id is None and found.owner is None
    assert kit.leftover("i-1", {}).created_at is None


def test_timeout_wrapper_and_the_timed_out_rule() -> None:
    argv = kit.timeout_argv("echo 'a b'", 2.5)
    assert argv == ["timeout", "-k", "1", "2.500", "/bin/sh", "-c", "echo 'a b'"]
    assert kit.timeout_command("echo 'a b'", 0) == (
        "timeout -k 1 0.001 /bin/sh -c 'echo '\"'\"'a b'\"'\"''"
    )
    kit.raise_if_timed_out(124, 0.2, 5.0)  # exited 124 by itself, before the timeout
    kit.raise_if_timed_out(0, 9.0, 5.0)
    for code in (124, 137):
        with pytest.raises(CommandTimeout, match=f"killed after 5 s \\(exit {code}\\)"):
            kit.raise_if_timed_out(code, 5.01, 5.0)
    assert kit.call_timeout(10.0, 30.0) == 10.0 + kit.KILL_GRACE_S + 30.0


def test_first_command_is_marked_once_at_the_first_success() -> None:
    env = Environment("e", "r")
    kit.first_command(env, CommandResult(1, "", "", 0.1))
    assert [m.name for m in env.milestones] == []
    kit.first_command(env, CommandResult(0, "", "", 0.1))
    kit.first_command(env, CommandResult(0, "", "", 0.1))
    assert [m.name for m in env.milestones] == ["first_command"]


def test_a_removal_is_confirmed_by_polling_and_its_resolution_kept() -> None:
    env = Environment("e", "r")
    answers = iter([None, None, True])
    kit.confirm_removed(
        env,
        lambda: next(answers),
        interval_s=0.001,
        deadline=clock() + 30,
        still_there=lambda: CleanupFailed("still there"),
    )
    assert [m.name for m in env.milestones] == ["removed"]
    assert env.resolution["cleanup"] > 0  # found on a later poll: its gap is disclosed
    stuck = Environment("e", "r")
    with pytest.raises(CleanupFailed, match="still there"):
        kit.confirm_removed(
            stuck,
            lambda: None,
            interval_s=0.001,
            deadline=clock() + 0.05,
            still_there=lambda: CleanupFailed("still there"),
        )
    assert stuck.milestones == [] and "cleanup" not in stuck.resolution


def test_a_start_is_confirmed_by_polling_and_its_resolution_kept() -> None:
    env = Environment("e", "r")
    answers = iter([None, True])
    kit.confirm_running(
        env,
        lambda: next(answers),
        interval_s=0.001,
        timeout_s=30,
        not_running=lambda: ReadyTimeout("not running"),
    )
    assert [m.name for m in env.milestones] == ["running"]
    assert env.resolution["orchestration"] > 0  # seen on the second poll: its gap is disclosed
    at_once = Environment("e", "r")
    kit.confirm_running(
        at_once,
        lambda: True,
        interval_s=0.001,
        timeout_s=30,
        not_running=lambda: ReadyTimeout("not running"),
    )
    assert at_once.resolution["orchestration"] == 0.0  # running before the first look
    stuck = Environment("e", "r")
    with pytest.raises(ReadyTimeout, match="not running"):
        kit.confirm_running(
            stuck,
            lambda: None,
            interval_s=0.001,
            timeout_s=0.05,
            not_running=lambda: ReadyTimeout("not running"),
        )
    assert stuck.milestones == [] and "orchestration" not in stuck.resolution


def test_a_container_tool_gets_its_own_variables_and_no_credential() -> None:
    """The podman and docker CLIs get what they need of this process's environment; registry
    credentials (``DOCKER_AUTH_CONFIG``, GitLab CI's way to log in) and tokens never."""
    environ = {
        "PATH": "/usr/bin",
        "DOCKER_HOST": "unix:///run/docker.sock",
        "DOCKER_AUTH_CONFIG": '{"auths": {"r.example": {"auth": "dXNlcjpwdw=="}}}',
        "CONTAINERS_STORAGE_CONF": "/etc/containers/storage.conf",
        "DOCKER_TOKEN": "abcdefgh12345678",
        "AWS_SECRET_ACCESS_KEY": "planted-aws-secret",
        "XAUTHORITY": "/root/.Xauthority",
    }
    assert kit.tool_env(environ) == {
        "PATH": "/usr/bin",
        "DOCKER_HOST": "unix:///run/docker.sock",
        "CONTAINERS_STORAGE_CONF": "/etc/containers/storage.conf",
    }


def _child(script: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["/bin/sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "stdlib fallback"])
def test_communicate_returns_both_streams_whole_and_the_exit(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open")
    # More than a pipe's buffer on each stream, interleaved, so neither read may wait on the other.
    proc = _child(
        "i=0; while [ $i -lt 3000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done; exit 3"
    )
    out, err = kit.communicate(proc, 30)
    assert out.decode().split() == [f"out{i}" for i in range(3000)]
    assert err.decode().split() == [f"err{i}" for i in range(3000)]
    assert proc.returncode == 3


def test_communicate_waits_for_the_exit_without_a_polling_sleep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reason it exists: `Popen.communicate(timeout=...)` polls `waitpid` with sleeps from
    0.5 ms, charged to every action. Here the child closes both pipes first and exits later, the
    case that polled; the wait must wake on the exit itself, never by sleeping."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    proc = _child("exec >&- 2>&-; sleep 0.2; exit 7")
    assert kit.communicate(proc, 30) == (b"", b"")
    assert proc.returncode == 7
    assert slept == []


def test_communicate_raises_timeout_expired_and_leaves_the_child_to_the_caller() -> None:
    proc = _child("echo started; exec sleep 30")
    with pytest.raises(subprocess.TimeoutExpired):
        kit.communicate(proc, 0.3)
    assert proc.poll() is None  # still running: killing it is the caller's choice, as with Popen
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
