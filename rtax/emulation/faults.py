"""One fault-injection vocabulary for every emulation (docs/emulations.md).

Why: a failure path is tested by planting the failure in an emulation and checking how the
substrate classifies it. With one vocabulary the same sentence plants the same kind of failure in
any emulation, each answering it in its own service's format, and a planted fault behaves the
same way everywhere (how many times, in which order, how late, with which headers).

Every emulation has a `Faults` as ``faults``; a test says what the service does next:

- ``fail(operation, status, *, code=None, message=None, retry_after=None, delay_s=0, times=1,
  accepted=False)``: the next `times` occurrences of `operation` (``times=None``: every one,
  until cleared) fail.
  A *request* is answered with HTTP `status` in the service's own error format, without doing
  the work: `code` is the service's name for the error (the Kubernetes ``reason``, the AWS error
  code, Daytona's ``error``), `message` is echoed verbatim (a planted secret included: that is
  how the secret tests check an API that echoes credentials), `retry_after` adds a
  ``Retry-After`` header, and the answer is sent `delay_s` late. With ``accepted=True`` the
  request *is* done first and only then answered with the error: the service accepted the work
  and the answer was lost or wrong (a 500 after a create went through), the case a client must
  clean up after without knowing what it made. A service whose errors are
  named by code (EC2, SSM) knows each code's status and message, so ``fail("RunInstances",
  code="UnauthorizedOperation")`` is enough. A *background* operation (one the service does on
  its own, with no request to answer) takes no status: it fails the way the service shows it.
- ``delay(operation, seconds, *, times=1)``: the next `times` occurrences are done, but answered
  `seconds` late (a lost answer, when the client gives up first); a background one happens late.
- ``clear()``: no planted fault is left (one already taken still runs its course).

Faults on one operation apply in the order planted. An unknown operation, a status on a
background operation or a request fault without a status is a `ValueError` at once: a typo must
not plant nothing. Each emulation matches faults in one place, where it dispatches a request.

The operations, per emulation:

- **kubernetes**, requests: ``version``, ``create`` (POST pod), ``get``, ``delete``, ``list``
  (pods), ``events`` (list events), ``watch`` (pods or events), ``exec`` (a delayed exec holds
  the WebSocket upgrade unanswered, then drops the connection); background: ``schedule`` (a
  failed one leaves the pod Pending, ``PodScheduled`` False ``Unschedulable`` with the message;
  the scheduler retries every 0.1 s, each retry an occurrence: ``times=None`` holds it).
- **ec2**, requests: the EC2 actions ``RunInstances``, ``DescribeInstances``,
  ``TerminateInstances``, ``DescribeImages`` and the SSM targets ``SendCommand``,
  ``GetCommandInvocation``, ``DescribeInstanceInformation``, ``CancelCommand``; background:
  ``agent`` (the SSM agent of a launched instance: failed, it never comes online; delayed, it
  comes online late).
- **daytona**, requests: ``create``, ``get``, ``list``, ``delete``, ``toolbox_url``,
  ``sandbox_snapshot``, ``fork``, ``pause``, ``start_sandbox``, ``snapshot_get``,
  ``snapshot_delete``, ``metrics``, ``execute``, ``session_create``, ``session_list``,
  ``session_get``, ``session_delete``, ``session_exec``, ``command_get``, ``command_logs``;
  background: ``start`` (a created sandbox starting: failed, it goes to state ``error`` with
  the message as ``errorReason``; delayed, it provisions that long) and ``snapshot`` (a
  sandbox's container committed into a snapshot: failed, the snapshot goes to ``error`` and
  the sandbox back to started; delayed, it commits that long).

Not faults: what happens now to one named object (Daytona's ``set_error`` breaks a running
sandbox) is a method of its emulation, and real API calls (terminating an EC2 instance) are made
through the client. Faults are planted from Python only: no emulation exposes them over HTTP.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class Fault:
    """What one occurrence of an operation does instead of its normal course."""

    operation: str
    #: True: the operation fails (a request is answered with `status`); False: it is only late
    failing: bool
    status: int | None
    code: str | None
    message: str
    retry_after: int | None
    delay_s: float
    #: occurrences left (None: every one until cleared)
    times: int | None
    #: a failing request is done first, then answered with the error (``fail(accepted=True)``)
    accepted: bool = False

    @property
    def refuses(self) -> bool:
        """The request is answered with the error *instead of* being done."""
        return self.failing and not self.accepted

    @property
    def headers(self) -> dict[str, str]:
        """Headers the error answer carries (every emulation sends them)."""
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


class Faults:
    """The faults planted in one emulation; thread-safe, shared by its request handlers and
    background work.

    `requests` and `background` name the emulation's operations (name -> what it is); `codes`,
    for services whose errors are named by code, gives each code's HTTP status and message."""

    def __init__(
        self,
        requests: Mapping[str, str],
        background: Mapping[str, str] | None = None,
        codes: Mapping[str, tuple[int, str]] | None = None,
    ) -> None:
        self.requests = dict(requests)
        self.background = dict(background or {})
        self.codes = dict(codes or {})
        self._planted: dict[str, list[Fault]] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def operations(self) -> list[str]:
        return sorted({*self.requests, *self.background})

    def fail(
        self,
        operation: str,
        status: int | None = None,
        *,
        code: str | None = None,
        message: str | None = None,
        retry_after: int | None = None,
        delay_s: float = 0.0,
        times: int | None = 1,
        accepted: bool = False,
    ) -> None:
        """The next `times` occurrences of `operation` fail (see the module docstring);
        `accepted`: the request is done, then answered with the error."""
        self._check(operation, times)
        if operation in self.background:
            if status is not None or code is not None or retry_after is not None or accepted:
                raise ValueError(f"{operation} is a background operation: it has no answer")
            text = message if message is not None else f"injected failure of {operation}"
        else:
            known_status, known_message = self.codes.get(code or "", (None, None))
            status = status if status is not None else known_status
            if status is None:
                raise ValueError(f"a failing {operation} needs a status (or a known code)")
            default = (
                f"injected {status} on {operation}" if known_message is None else known_message
            )
            text = message if message is not None else default
        fault = Fault(operation, True, status, code, text, retry_after, delay_s, times, accepted)
        with self._lock:
            self._planted.setdefault(operation, []).append(fault)

    def delay(self, operation: str, seconds: float, *, times: int | None = 1) -> None:
        """The next `times` occurrences of `operation` are done, `seconds` late."""
        self._check(operation, times)
        fault = Fault(operation, False, None, None, "", None, seconds, times)
        with self._lock:
            self._planted.setdefault(operation, []).append(fault)

    def clear(self) -> None:
        with self._lock:
            self._planted.clear()

    def take(self, operation: str) -> Fault | None:
        """The fault for this occurrence of `operation`, or None: the one place an emulation
        asks, once per request (or background occurrence)."""
        with self._lock:
            queue = self._planted.get(operation)
            if not queue:
                return None
            fault = queue[0]
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    queue.pop(0)
            return fault

    # -- waiting out a delay, ended early when the emulation stops --------------------------

    def wait(self, seconds: float) -> None:
        """Block `seconds` (a worker thread's delay); returns at once once `close`d."""
        if seconds > 0:
            self._closed.wait(seconds)

    async def wait_async(self, seconds: float) -> None:
        """`wait` for an event loop: polls the closed flag, so a stopping server is not held."""
        deadline = time.monotonic() + seconds
        while not self._closed.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, max(deadline - time.monotonic(), 0)))

    def open(self) -> None:
        """The emulation serves: delays run their course."""
        self._closed.clear()

    def close(self) -> None:
        """The emulation stops: every delay being waited out ends now."""
        self._closed.set()

    def _check(self, operation: str, times: int | None) -> None:
        if operation not in self.requests and operation not in self.background:
            raise ValueError(f"no operation {operation!r} (known: {', '.join(self.operations)})")
        if times is not None and times < 1:
            raise ValueError(f"times must be at least 1 or None (every time), not {times}")
