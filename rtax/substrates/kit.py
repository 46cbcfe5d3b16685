"""The substrate kit: what every substrate needs besides its own API, written once.

Why a kit (docs/adding-a-substrate.md): the probe runner compares substrates, so the things
that shape a sample or its clean-up must not differ by accident from one kind to another. A
substrate's file keeps only what is specific to its API (which call creates, how a state is
read, how an error is classified) and takes the rest from here:

- labels and leftovers: one label vocabulary for every environment (`labels`, `selector`),
  its expiry included, and one way back from labels to a `Leftover` (`leftover`), so that
  `rtax reap` reads every kind alike. Each kind renders the dict in its API's form (container
  labels, pod labels and annotations, instance tags, sandbox labels, a label file).
- rate limits: one `RetryPolicy` (attempts, exponential backoff from `base_s` capped at `max_s`,
  a deadline), one rule for Retry-After, and every wait recorded (`RateLimitWait`).
- polling: `poll` (`rtax.substrates.poll`): a fixed interval, a deadline, and the resolution
  disclosed; `confirm_removed`, the poll that ends every cleanup.
- what commands see: `command_env`, the one allow-listed environment every kind sets
  explicitly where its API takes one, never anything of this process's environment; and
  `tool_env`, what a container tool's CLI process gets of it.
- command timeouts: the in-environment ``timeout`` wrapper (`timeout_argv`), the rule that tells
  a command it killed from one that exited 124 by itself (`raise_if_timed_out`), and the bound
  of the API call that carries a command (`call_timeout`).
- local processes: `communicate`, a child's output and exit within a deadline without the
  polling wait of ``Popen.communicate(timeout=...)``, which would add to every action's latency.
"""

from __future__ import annotations

import email.utils
import os
import random
import selectors
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, TypeVar

from rtax.core import redaction
from rtax.core.failures import CommandTimeout, RateLimited
from rtax.substrates.base import LABEL, CommandResult, Environment, Leftover, RateLimitWait, clock
from rtax.substrates.poll import Polled, poll

__all__ = [
    "COMMAND_ENV",
    "EXPIRY_GRACE_S",
    "KILL_GRACE_S",
    "Polled",
    "RetryPolicy",
    "call_timeout",
    "command_env",
    "confirm_removed",
    "first_command",
    "labels",
    "leftover",
    "owner",
    "owner_host",
    "poll",
    "raise_if_timed_out",
    "retry_after_header",
    "selector",
    "timeout_argv",
    "timeout_command",
    "tool_env",
]

T = TypeVar("T")

# -- labels and leftovers ---------------------------------------------------------------------

RUN_ID = f"{LABEL}.run_id"
CREATED_AT = f"{LABEL}.created_at"
OWNER = f"{LABEL}.owner"
SUBSTRATE = f"{LABEL}.substrate"
EXPIRES_AT = f"{LABEL}.expires_at"

#: Added to an environment's lifetime for its expiry: clock skew between the host that labels
#: and the host that reaps, and a call in flight at the deadline that answers a little late.
EXPIRY_GRACE_S = 300.0


def owner_host() -> str:
    """This process's host as the reaper knows it: the host name and the PID namespace.

    Why the namespace: two processes may share a host name and not their pids (a container
    with ``--network host`` has the host's name and a pid namespace of its own). A reaper
    there would find a live owner's pid "gone" and remove an environment still in use; only an
    owner of the same name *and* namespace can be checked by pid."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # no /proc (not Linux): the host name alone
        return socket.gethostname()
    return f"{socket.gethostname()}/{namespace}"


def owner() -> str:
    """ "host/pidns:pid" of this process (`owner_host`): what the reaper checks before
    removing an environment that has not expired."""
    return f"{owner_host()}:{os.getpid()}"


def labels(run_id: str, substrate: str, lifetime_s: float | None = None) -> dict[str, str]:
    """The labels of a new environment: the rtax mark, its run id, creation time (UTC, ISO),
    owner and substrate name (several names share a kind and an endpoint: each reaps its own),
    and, given the `lifetime_s` its rollout may use it (`Substrate.create`), its expiry: created
    + lifetime + `EXPIRY_GRACE_S`. Past its expiry no live rollout uses it, whoever owns it,
    and the reaper removes it (docs/adding-a-substrate.md#leftovers)."""
    created = datetime.now(UTC)
    marks = {
        LABEL: "1",
        RUN_ID: run_id,
        CREATED_AT: created.isoformat(),
        OWNER: owner(),
        SUBSTRATE: substrate,
    }
    if lifetime_s is not None:
        expires = created + timedelta(seconds=lifetime_s + EXPIRY_GRACE_S)
        marks[EXPIRES_AT] = expires.isoformat()
    return marks


def selector(substrate: str) -> dict[str, str]:
    """The labels every environment of the substrate named `substrate` carries (and no other's)."""
    return {LABEL: "1", SUBSTRATE: substrate}


def leftover(
    env_id: str,
    found: Mapping[str, Any],
    *,
    created_at: str | datetime | float | None = None,
    detail: str = "",
    frozen: bool = False,
) -> Leftover:
    """A `Leftover` from the labels an environment carries. `created_at` is the API's own
    creation time (ISO text, a datetime or a Unix time), used when the label has none;
    `frozen`: listed paused (`Leftover.frozen`)."""
    created = found.get(CREATED_AT) or created_at
    if isinstance(created, datetime):
        created = created.isoformat()
    elif isinstance(created, (int, float)):
        created = datetime.fromtimestamp(created, UTC).isoformat()
    return Leftover(
        env_id=env_id,
        run_id=found.get(RUN_ID),
        created_at=created,
        owner=found.get(OWNER),
        detail=detail,
        expires_at=found.get(EXPIRES_AT),
        frozen=frozen,
    )


# -- rate limits ------------------------------------------------------------------------------


def equal_jitter(wait_s: float) -> float:
    """A backoff wait drawn from [wait/2, wait]: a fleet of rollouts refused at once does not
    come back at once, and no wait falls below half the backoff."""
    return wait_s * random.uniform(0.5, 1.0)


def retry_after_header(
    headers: Mapping[str, Any] | None, wall: Callable[[], float] = time.time
) -> float | None:
    """Seconds asked for by a Retry-After header (delta-seconds or an HTTP date), else None."""
    if not headers:
        return None
    value = headers.get("Retry-After") or headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - wall(), 0.0)


def _retry_after_of(exc: BaseException) -> float | None:
    """Retry-After from an exception that carries the response's headers (most HTTP clients'
    errors: urllib3/OpenAPI ``headers``; botocore's ``response["ResponseMetadata"]``)."""
    headers = getattr(exc, "headers", None)
    if headers is None:
        meta = (getattr(exc, "response", None) or {}).get("ResponseMetadata") or {}
        headers = meta.get("HTTPHeaders")
    try:
        return retry_after_header(headers)
    except AttributeError:  # headers of another shape: none usable
        return None


@dataclass(frozen=True)
class RetryPolicy:
    """How a substrate answers "slow down" (HTTP 429, a throttling code): retry, wait, give up.

    Attempt n's refusal is followed by a wait of ``base_s * 2**(n-1)``, jittered, at most
    `max_s`. When the service says how long to wait (Retry-After), that is the wait, with no
    jitter (the service chose the moment), still capped at `max_s` so one answer cannot stall
    a rollout. It gives up with `RateLimited` after `attempts` attempts, or at once when the
    wait would end past the deadline (`deadline_s` from the first attempt, or the caller's
    own, e.g. a command's timeout): a wait that ends too late only delays the same verdict.

    Every wait is handed to the caller's `on_wait` as a `RateLimitWait`, so that the sample it
    slowed down says so; `describe()` is the policy for provenance. `now`, `sleep` and `jitter`
    are injectable for tests (a fake clock makes the waits exact and instant).
    """

    attempts: int = 6
    base_s: float = 0.5
    max_s: float = 10.0
    deadline_s: float = 60.0
    jitter: Callable[[float], float] = field(default=equal_jitter, compare=False)
    now: Callable[[], float] = field(default=clock, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts!r}")
        if self.base_s < 0 or self.max_s < 0 or self.deadline_s <= 0:
            raise ValueError("base_s and max_s must be >= 0 and deadline_s > 0")

    def wait_s(self, attempt: int, retry_after_s: float | None) -> float:
        """The wait after attempt `attempt` (1 = the first) was refused."""
        if retry_after_s is not None:
            return min(retry_after_s, self.max_s)
        return min(self.jitter(self.base_s * 2 ** (attempt - 1)), self.max_s)

    def call(
        self,
        fn: Callable[[], T],
        *,
        what: str,
        limited: Callable[[BaseException], bool],
        retry_after: Callable[[BaseException], float | None] = _retry_after_of,
        detail: Callable[[BaseException], str] = lambda exc: str(exc)[:300],
        deadline: float | None = None,
        on_wait: Callable[[RateLimitWait], None] | None = None,
    ) -> T:
        """`fn()`, retried while `limited(exc)` says its exception means "slow down"; any
        other exception propagates at once. `deadline` (on the `now` timeline) replaces
        `deadline_s` for this call. Raises `RateLimited` (from the last refusal) on giving up."""
        end = self.now() + self.deadline_s if deadline is None else deadline
        waited = 0.0
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except Exception as exc:
                if not limited(exc):
                    raise
                asked = retry_after(exc)
                wait = self.wait_s(attempt, asked)
                if attempt >= self.attempts or self.now() + wait > end:
                    raise RateLimited(
                        f"{what}: still rate limited after {attempt} attempts "
                        f"({waited:.3g} s waited): {detail(exc)}"
                    ) from exc
                if on_wait is not None:
                    on_wait(RateLimitWait(what, attempt, wait, asked))
                self.sleep(wait)  # backing off is the point: the service asked for it
                waited += wait

    def describe(self) -> dict[str, Any]:
        """The policy as provenance (figures taken under rate limiting depend on it)."""
        return {
            "attempts": self.attempts,
            "base_s": self.base_s,
            "max_s": self.max_s,
            "deadline_s": self.deadline_s,
            "retry_after": "used as the wait, capped at max_s",
            "jitter": getattr(self.jitter, "__name__", "custom"),
        }


# -- verified removal ---------------------------------------------------------------------------


def confirm_running(
    env: Environment,
    running: Callable[[], bool | None],
    *,
    interval_s: float,
    timeout_s: float,
    not_running: Callable[[], Exception],
) -> None:
    """After a start: poll `running` until it says the environment runs, record the poll's
    resolution as the orchestration phase's and mark ``running``; `not_running()` is raised
    after `timeout_s`. The substrate's own "it runs" is the end of orchestration."""
    found = poll(running, interval_s=interval_s, deadline=clock() + timeout_s, timeout=not_running)
    env.resolved("orchestration", found.resolution_s)
    env.mark("running")


def confirm_removed(
    env: Environment,
    gone: Callable[[], bool | None],
    *,
    interval_s: float,
    deadline: float,
    still_there: Callable[[], Exception],
) -> None:
    """After a delete: poll `gone` until it says the environment is gone, record the poll's
    resolution as the cleanup phase's and mark ``removed``; `still_there()` is raised at the
    deadline. Deletion is asynchronous almost everywhere, and "cleanup" means verified gone."""
    found = poll(gone, interval_s=interval_s, deadline=deadline, timeout=still_there)
    env.resolved("cleanup", found.resolution_s)
    env.mark("removed")


# -- what commands see -------------------------------------------------------------------------

#: The variables every substrate sets for its commands, on top of the image's own (PATH and the
#: like): an allow-list, the same on every kind. Nothing of this process's environment is ever
#: passed on (no credentials, no proxies), and no API's default passthrough is left on (Docker
#: clients' configured proxies, podman's ``--http-proxy``). docs/configuration.md#secrets
COMMAND_ENV: Mapping[str, str] = MappingProxyType(
    {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
)


def command_env() -> dict[str, str]:
    """A fresh copy of `COMMAND_ENV` (APIs take and may keep a mutable dict)."""
    return dict(COMMAND_ENV)


#: What a container tool's CLI process (podman, docker) gets of this process's environment:
#: these names, and those with these prefixes (where it finds its configuration, store, engine
#: and runtime directory), unless a name says credential (`redaction.CREDENTIAL_NAME`).
TOOL_ENV_NAMES = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "DBUS_SESSION_BUS_ADDRESS"}
)
TOOL_ENV_PREFIXES = ("LC_", "XDG_", "CONTAINERS_", "CONTAINER_", "DOCKER_")


def tool_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What of `environ` a container tool's CLI process gets (`TOOL_ENV_NAMES`,
    `TOOL_ENV_PREFIXES`): no credential, no proxy, nothing it does not need."""
    return {
        key: value
        for key, value in environ.items()
        if (key in TOOL_ENV_NAMES or key.startswith(TOOL_ENV_PREFIXES))
        and not redaction.CREDENTIAL_NAME.search(key)
    }


# -- command timeouts -------------------------------------------------------------------------

#: Seconds between coreutils ``timeout``'s TERM and its KILL.
KILL_GRACE_S = 1.0
#: Exit codes of coreutils ``timeout`` when it stopped the command: TERM (124), KILL (137).
TIMEOUT_EXITS = (124, 137)


def timeout_argv(command: str, timeout_s: float, shell: str = "/bin/sh") -> list[str]:
    """`command` under coreutils ``timeout``, as argv: the timeout is enforced where the command
    runs, so a hung action stops even when the API that carries it does not answer."""
    limit = f"{max(timeout_s, 0.001):.3f}"
    return ["timeout", "-k", f"{KILL_GRACE_S:g}", limit, shell, "-c", command]


def timeout_command(command: str, timeout_s: float, shell: str = "/bin/sh") -> str:
    """`timeout_argv` as one shell-quoted string, for APIs that take a command line."""
    return shlex.join(timeout_argv(command, timeout_s, shell))


def raise_if_timed_out(exit_code: int | None, latency_s: float, timeout_s: float) -> None:
    """Raise `CommandTimeout` when ``timeout`` stopped the command: its exit code, *and* the
    timeout has passed (a command may exit 124 by itself, e.g. an agent's own ``timeout``)."""
    if exit_code in TIMEOUT_EXITS and latency_s >= timeout_s:
        raise CommandTimeout(f"killed after {timeout_s:.3g} s (exit {exit_code})")


def call_timeout(timeout_s: float, margin_s: float) -> float:
    """The bound of the API call that carries a command with `timeout_s`: the command's time,
    ``timeout``'s kill grace, and `margin_s` for the answer to come back. It is a backstop for
    an API that stops answering; it must never cut a command that ``timeout`` is about to stop
    (that would turn a clean `CommandTimeout` into a transport error)."""
    return timeout_s + KILL_GRACE_S + margin_s


def first_command(env: Environment, result: CommandResult) -> CommandResult:
    """Mark the native milestone ``first_command`` at the environment's first success."""
    if result.exit_code == 0 and not any(m.name == "first_command" for m in env.milestones):
        env.mark("first_command")
    return result


def communicate(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[bytes, bytes]:
    """``proc.communicate(timeout=timeout_s)`` for a child with piped stdout and stderr, without
    its polling wait; raises `subprocess.TimeoutExpired` as it does.

    Why: with a timeout, CPython 3.11's ``Popen.wait`` polls ``waitpid`` with sleeps from 0.5 ms
    doubling, so a command whose pipes closed a moment before it exited was charged a sleep it
    never took (``make bench``: the local substrate's ``echo ok`` +1.1 ms over a bare
    ``subprocess.run`` in half the runs, the whole of rtax's cost). A pidfd turns readable when
    the child exits, so one ``poll`` waits for both pipes and the exit and wakes for whichever
    comes. Where pidfds are missing (not Linux, or a kernel before 5.3) it is the stdlib call.
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return proc.communicate(timeout=timeout_s)
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    stdout, stderr = proc.stdout.fileno(), proc.stderr.fileno()
    out: dict[int, list[bytes]] = {stdout: [], stderr: []}
    try:
        with selectors.PollSelector() as waiting:
            for fd in out:
                waiting.register(fd, selectors.EVENT_READ)
            waiting.register(pidfd, selectors.EVENT_READ)
            while waiting.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(proc.args, timeout_s)
                for key, _ in waiting.select(left):
                    fd = key.fd
                    chunk = b"" if fd == pidfd else os.read(fd, 65536)
                    if chunk:
                        out[fd].append(chunk)
                    else:  # end of a pipe, or the child has exited
                        waiting.unregister(fd)
    finally:
        os.close(pidfd)
    proc.stdout.close()
    proc.stderr.close()
    proc.wait()  # it has exited: this reaps it at once
    return b"".join(out[stdout]), b"".join(out[stderr])
