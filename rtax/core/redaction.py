"""Every secret rtax holds, and the scrubbing that keeps them out of all text that leaves rtax.

Why one process-wide registry: a credential can surface far from where it was read (an API
that echoes a bad token in its refusal, a chained cause printed by ``log.exception``, a failing
command's output in ``actions.detail``), so the places text leaves through (exceptions, log
records, run and action rows, CSV exports) all scrub against one list. What counts as held:

- every value `register`-ed: each ``*_env`` parameter `rtax.substrates.build_substrate` reads, and
  each credential a substrate resolves itself (a kubeconfig's token, a Daytona key, the AWS
  chain's secret key and session token);
- the values of this process's environment variables whose names say credential
  (`CREDENTIAL_NAME`), and the password of a proxy URL (``HTTPS_PROXY=http://user:pw@...``),
  read at each scrub, so a variable set after start-up counts too.

Log records are scrubbed as they are made (`install` wraps the log record factory), so every
handler, rtax's or a library's, gets scrubbed text. docs/configuration.md#secrets.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import traceback
from collections.abc import Iterable, Mapping
from typing import Any

#: What a secret is replaced with.
MASK = "***"
#: Environment variables whose values are credentials, by name.
CREDENTIAL_NAME = re.compile(
    r"(password|passwd|secret|token|api_?key|access_?key|credential|private_?key"
    r"|(?<![a-z])auth(?![a-z]))",  # DOCKER_AUTH_CONFIG, REGISTRY_AUTH_FILE; not XAUTHORITY
    re.I,
)
#: Shorter values are not taken from the environment (scrubbing "1" or "true" would mangle
#: every text); a registered secret needs `MIN_REGISTERED` characters.
MIN_FROM_ENV = 8
MIN_REGISTERED = 4
#: The password of a URL's userinfo (``scheme://user:password@host``).
_USERINFO_PASSWORD = re.compile(r"://[^:/@\s]*:([^@/\s]+)@")
#: Attributes that exceptions with their own ``__str__`` build their message from, outside
#: ``__dict__`` (OSError's are C members).
_MESSAGE_ATTRS = ("strerror", "filename", "filename2", "msg", "reason", "body", "message")

_registered: set[str] = set()
_lock = threading.Lock()
_installed = False


def register(*values: str | None) -> None:
    """Hold `values` as secrets from now on (empty and very short ones are ignored) and make
    sure log records are scrubbed (`install`)."""
    fresh = {str(v) for v in values if v and len(str(v)) >= MIN_REGISTERED}
    if fresh:
        with _lock:
            _registered.update(fresh)
    install()


def held(extra: Iterable[str] = ()) -> list[str]:
    """Every secret held now (registered, from the environment, and `extra`), longest first
    so that a secret containing another is masked whole."""
    found = set(_registered) | {s for s in extra if s}
    for name, value in os.environ.items():
        if CREDENTIAL_NAME.search(name) and len(value) >= MIN_FROM_ENV:
            found.add(value)
        if name.lower().endswith("_proxy"):
            found.update(m.group(1) for m in _USERINFO_PASSWORD.finditer(value))
    return sorted(found, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str] | None = None) -> str:
    """`text` with every secret held (or every one of `secrets`) replaced by `MASK`."""
    for secret in held() if secrets is None else secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


def scrub_value(value: Any, secrets: list[str]) -> Any:
    """`value` scrubbed: text and bytes, and inside lists, tuples and mappings (as copies:
    a mapping an exception refers to may be someone's live state)."""
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, bytes):
        for secret in secrets:
            value = value.replace(secret.encode(), MASK.encode())
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(scrub_value(v, secrets) for v in value)
    if isinstance(value, Mapping):
        return {k: scrub_value(v, secrets) for k, v in value.items()}
    return value


def scrub_exception(exc: BaseException, extra: Iterable[str] = ()) -> BaseException:
    """Scrub `exc` and every exception chained to it (``__cause__``, ``__context__``) in
    place: their args, their attributes (an `ApiException`'s body and headers, a
    `ClientError`'s response) and, for a message built some other way, their ``__str__``.
    Returns `exc`, still of its own class (what classifies a failure)."""
    secrets = held(extra)
    if not secrets:
        return exc
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        _scrub_one(current, secrets)
        todo += [current.__cause__, current.__context__]
    return exc


def _scrub_one(exc: BaseException, secrets: list[str]) -> None:
    readonly = (TypeError, AttributeError)  # an attribute that can't be set is left as it is
    with contextlib.suppress(*readonly):
        exc.args = scrub_value(tuple(exc.args), secrets)
    names = [n for n in getattr(exc, "__dict__", {}) if not n.startswith("__")]
    for name in [*names, *_MESSAGE_ATTRS]:
        value = getattr(exc, name, None)
        if value is not None:
            with contextlib.suppress(*readonly):
                setattr(exc, name, scrub_value(value, secrets))
    if any(s in _text(exc) for s in secrets):
        _mask_str(exc)


def _text(exc: BaseException) -> str:
    try:
        return f"{exc} {exc!r}"
    except Exception:  # a broken __str__ cannot leak what it cannot print
        return ""


def _mask_str(exc: BaseException) -> None:
    """Last resort for a message built from state no scrub reaches: give `exc` a subclass of
    its own class whose ``__str__`` and ``__repr__`` scrub (isinstance still holds)."""
    cls = type(exc)

    def reduce(self: BaseException) -> Any:  # pickled as its own class, which pickle can find
        parts = cls.__reduce__(self)
        return (cls if parts[0] is masked else parts[0], *parts[1:])

    masked = type(
        cls.__name__,
        (cls,),
        {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__str__": lambda self: scrub(cls.__str__(self)),
            "__repr__": lambda self: scrub(cls.__repr__(self)),
            "__reduce__": reduce,
        },
    )
    # a built-in type refuses; its message is its args and attributes, scrubbed above
    with contextlib.suppress(TypeError):
        exc.__class__ = masked


def scrub_record(record: logging.LogRecord) -> logging.LogRecord:
    """`record` with its message, exception (chain included) and stack scrubbed; the
    message is rendered first only when it carried a secret."""
    secrets = held()
    if not secrets:
        return record
    try:
        message = record.getMessage()
    except Exception:  # a malformed record: logging reports it; it cannot carry our text
        return record
    if any(s in message for s in secrets):
        record.msg, record.args = scrub(message, secrets), None
    if record.exc_info and record.exc_info[1] is not None:
        scrub_exception(record.exc_info[1])
        record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info)), secrets)
        record.exc_text = record.exc_text.rstrip("\n")
    if record.stack_info:
        record.stack_info = scrub(record.stack_info, secrets)
    return record


class ScrubFilter(logging.Filter):
    """A handler filter that scrubs each record (for handlers made before `install`, or in
    processes that must not change the record factory); it never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        scrub_record(record)
        return True


def install() -> None:
    """Scrub every log record made in this process from now on, whatever logger or handler
    (wraps `logging.getLogRecordFactory`; idempotent). The CLI, the scheduler and
    `rtax emulate` call it at start; `register` calls it too."""
    global _installed
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return scrub_record(previous(*args, **kwargs))

        logging.setLogRecordFactory(factory)
        _installed = True
