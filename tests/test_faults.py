"""One fault vocabulary for every emulation: its rules on their own, then the same planted fault
answered the same way (status, count, Retry-After, the message echoed, lateness) by each one."""

from __future__ import annotations

import importlib
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from polling import DEADLINE_S
from rtax.emulation import faults, get_emulation
from rtax.emulation.faults import Faults
from rtax.substrates.base import clock


def _faults() -> Faults:
    return Faults(
        {"create": "make one", "get": "read one"},
        {"start": "it starts"},
        {"Throttled": (503, "Slow down.")},
    )


def test_times_order_and_clear() -> None:
    f = _faults()
    f.fail("create", 429, times=2)
    f.delay("create", 1.5)
    taken = [f.take("create") for _ in range(4)]
    assert [(t.failing, t.status) for t in taken[:3] if t] == [(True, 429)] * 2 + [(False, None)]
    assert taken[2] is not None and taken[2].delay_s == 1.5
    assert taken[3] is None and f.take("get") is None
    f.fail("get", 500, times=None)  # every time, until cleared
    assert all(f.take("get") is not None for _ in range(50))
    f.clear()
    assert f.take("get") is None


def test_messages_codes_and_headers() -> None:
    f = _faults()
    f.fail("create", code="Throttled", retry_after=2)
    f.fail("create", 403, message="token s3cr3t is not allowed")
    f.fail("create", 500)
    f.fail("start", message="no capacity")
    known, echoed, default = (f.take("create") for _ in range(3))
    assert known and (known.status, known.message) == (503, "Slow down.")
    assert known.headers == {"Retry-After": "2"}
    assert echoed and echoed.message == "token s3cr3t is not allowed" and echoed.headers == {}
    assert default and default.message == "injected 500 on create"
    started = f.take("start")
    assert started and started.failing and started.message == "no capacity"


def test_mistakes_are_refused_at_once() -> None:
    f = _faults()
    with pytest.raises(ValueError, match="no operation 'craete'"):
        f.fail("craete", 500)
    with pytest.raises(ValueError, match="needs a status"):
        f.fail("create")
    with pytest.raises(ValueError, match="background operation"):
        f.fail("start", 500)
    with pytest.raises(ValueError, match="times"):
        f.delay("get", 1, times=0)


def test_an_accepted_fault_is_done_then_answered_with_the_error() -> None:
    f = _faults()
    f.fail("create", 500, accepted=True)
    f.fail("create", 500)
    accepted, refused = f.take("create"), f.take("create")
    assert accepted and accepted.failing and accepted.accepted and not accepted.refuses
    assert refused and refused.refuses
    with pytest.raises(ValueError, match="background operation"):
        f.fail("start", accepted=True)


def test_a_closed_faults_ends_every_delay() -> None:
    f = _faults()
    f.close()
    t0 = clock()
    f.wait(30)
    assert clock() - t0 < 1


# -- every emulation: the same sentence, the same behaviour ---------------------------------------

_FORM = "application/x-www-form-urlencoded"
#: an unsigned request's Authorization header: its scope is how moto tells EC2 apart
_SIGV4_EC2 = (
    "AWS4-HMAC-SHA256 Credential=rtax-emulated/20250101/us-east-1/ec2/aws4_request, "
    "SignedHeaders=host, Signature=0"
)
# kind -> a request operation, and how to make that request
_PROBES: dict[str, tuple[str, Any]] = {
    "kubernetes": ("version", lambda emu: urllib.request.Request(f"{emu.url}/version")),
    "ec2": (
        "DescribeImages",
        lambda emu: urllib.request.Request(
            emu.url,
            data=b"Action=DescribeImages&Version=2016-11-15",
            headers={"Authorization": _SIGV4_EC2, "Content-Type": _FORM},
        ),
    ),
    "daytona": (
        "list",
        lambda emu: urllib.request.Request(
            f"{emu.url}/api/sandbox", headers={"Authorization": f"Bearer {emu.api_key}"}
        ),
    ),
}


@pytest.fixture(params=sorted(_PROBES))
def emulated(request: pytest.FixtureRequest, runner_image: str) -> Iterator[tuple[str, Any]]:
    with get_emulation(request.param, image=runner_image) as emu:
        yield request.param, emu


def _ask(request: urllib.request.Request) -> tuple[int, Any, str]:
    """Status, headers (case-insensitive) and body of one answer."""
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE_S) as answer:
            return answer.status, answer.headers, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers, refused.read().decode()


def test_every_emulation_answers_the_same_fault_the_same_way(emulated: tuple[str, Any]) -> None:
    kind, emu = emulated
    operation, request = _PROBES[kind]
    emu.faults.fail(operation, 429, message="echo s3cr3t", retry_after=3, times=2)
    for _ in range(2):
        status, headers, body = _ask(request(emu))
        assert (status, headers.get("Retry-After")) == (429, "3")
        assert "echo s3cr3t" in body
    assert _ask(request(emu))[0] == 200  # twice, then served again
    emu.faults.delay(operation, 0.5)
    t0 = clock()
    assert _ask(request(emu))[0] == 200
    assert clock() - t0 >= 0.5
    emu.faults.fail(operation, 500, times=None)
    assert [_ask(request(emu))[0] for _ in range(3)] == [500] * 3
    emu.faults.clear()
    emu.faults.fail(operation, 503, message="done, then refused", accepted=True)
    status, _, body = _ask(request(emu))  # served, then answered with the error
    assert status == 503 and "done, then refused" in body
    emu.faults.clear()
    assert _ask(request(emu))[0] == 200


def test_every_operation_of_every_emulation_is_documented() -> None:
    from rtax.emulation import emulation_class, kinds

    documented = faults.__doc__ or ""
    for kind in kinds():
        module = importlib.import_module(emulation_class(kind).__module__.rpartition(".")[0])
        for operation in {**module.OPERATIONS, **module.BACKGROUND}:
            assert f"``{operation}``" in documented, (kind, operation)
