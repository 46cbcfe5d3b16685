"""Scrubbing (`rtax.core.redaction`): exceptions and their chains, log records of any logger, rows
and CSV exports. The end-to-end search over every substrate is tests/test_secrets.py."""

from __future__ import annotations

import io
import logging
import traceback
from pathlib import Path

import pytest

from factories import make_action, make_record, make_run
from rtax.core import redaction
from rtax.core.failures import CreateFailed, SubstrateError
from rtax.core.record import RolloutRecord
from rtax.store.database import Store
from rtax.substrates.base import redacting


class Echoed(Exception):
    """An API error whose message is built by ``__str__`` from an attribute (as kubernetes'
    ApiException builds it from ``body``)."""

    def __init__(self, body: str) -> None:
        super().__init__()
        self.body = body
        self.headers = {"WWW-Authenticate": f"Bearer {body}"}

    def __str__(self) -> str:
        return f"(403) Reason: Forbidden\nHTTP response body: {self.body}"


class Hidden(Exception):
    """An error whose message comes from state no attribute scrub reaches."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self._text = lambda: f"refused {secret}"

    def __str__(self) -> str:
        return self._text()


class Fake:
    """A substrate method that fails the way the kubernetes one does: its own error, raised
    from the client's, which echoes the token."""

    def __init__(self, token: str) -> None:
        self.token = token

    def _secrets(self) -> list[str]:
        return [self.token]

    @redacting
    def create(self, run_id: str) -> None:
        try:
            raise Echoed(f'{{"message": "token {self.token} is not allowed"}}')
        except Echoed as exc:
            raise CreateFailed(f"pod create: 403 for {self.token}") from exc


def _formatted(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def test_redacting_scrubs_the_whole_chain_and_keeps_the_class() -> None:
    token = "rtax-test-chain-token-61f0"
    with pytest.raises(CreateFailed) as caught:
        Fake(token).create("r1")
    exc = caught.value
    assert token not in _formatted(exc)  # what log.exception prints: the cause included
    assert token not in str(exc.__cause__) and token not in repr(exc.__cause__.headers)
    assert isinstance(exc.__cause__, Echoed) and "***" in str(exc.__cause__)
    assert exc.error_class == "create_failed"


def test_a_message_no_attribute_scrub_reaches_is_masked() -> None:
    secret = "rtax-test-hidden-secret-0c9e"
    redaction.register(secret)
    exc = redaction.scrub_exception(Hidden(secret))
    assert str(exc) == "refused ***"
    assert isinstance(exc, Hidden) and type(exc).__name__ == "Hidden"


def test_every_log_record_is_scrubbed_whatever_its_logger_or_handler() -> None:
    """A third-party logger, a handler of its own (not rtax's), a secret in the arguments and
    in a chained cause: the handler's output has none of it."""
    secret = "rtax-test-logged-secret-a7d2"
    redaction.register(secret)  # also installs the record factory
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger = logging.getLogger("some.library")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        try:
            raise Echoed(secret)
        except Echoed as cause:
            raise SubstrateError("outer") from cause
    except SubstrateError:
        logger.exception("call with %s failed", secret)
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert "call with *** failed" in text and "HTTP response body: ***" in text
    assert secret not in text


def test_scrub_filter_scrubs_a_record_made_before_install() -> None:
    secret = "rtax-test-filtered-secret-55e1"
    redaction.register(secret)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "key %s", (secret,), None)
    assert redaction.ScrubFilter().filter(record)
    assert record.getMessage() == "key ***"


def test_credentials_in_the_environment_are_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "rtax-test-env-token-9a")
    monkeypatch.setenv("HTTPS_PROXY", "http://me:rtax-test-proxy-pw@proxy:3128")
    monkeypatch.setenv("SOME_FLAG_TOKEN", "1")  # too short to be scrubbed everywhere
    held = redaction.held()
    assert {"rtax-test-env-token-9a", "rtax-test-proxy-pw"} <= set(held)
    assert "1" not in held
    assert redaction.scrub("t=rtax-test-env-token-9a") == "t=***"


def test_rows_and_csv_exports_are_scrubbed(tmp_path: Path) -> None:
    """A record made while a secret is held is scrubbed as it is made (its failing command's
    output included); one stored before the secret was known is scrubbed when exported."""
    early = "rtax-test-before-known-3b"
    late = "rtax-test-after-known-4c"
    before = make_record("r-early", status="failed", error_message=f"saw {early}")
    with Store(tmp_path / "rtax.db") as store:
        store.save_rollout(before)
        redaction.register(early, late)
        made = RolloutRecord(
            run=make_run("r-late", status="failed", error_message=f"saw {late}"),
            actions=[make_action("r-late", 0, detail=f"exit code 3: TOKEN={late}")],
        )
        assert made.run["error_message"] == "saw ***"
        assert made.actions[0]["detail"] == "exit code 3: TOKEN=***"
        store.save_rollout(made)
        for table in ("runs", "actions"):
            store.runs.export_csv(table, tmp_path / f"{table}.csv")
    text = (tmp_path / "runs.csv").read_text() + (tmp_path / "actions.csv").read_text()
    assert text.count("saw ***") == 2 and "TOKEN=***" in text
    assert early not in text and late not in text
