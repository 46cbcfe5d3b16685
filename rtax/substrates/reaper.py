"""The reaper: remove environments labelled rtax that no live rollout can still be using.

Why: the probe runner's own cleanup is the first line, but a crashed or SIGKILLed process, a
cleanup that failed or a create whose answer was lost leave an environment behind, and a leaked
container costs memory (on a cloud, money). Every rtax environment records its owner as
"host/pid-namespace:pid" (`kit.owner`) and, made by a rollout, when it expires: its creation +
the rollout's deadline and cleanup time + a grace (`kit.labels`). A leftover is an orphan
(docs/substrates/docker.md#reaper):

1. when it has **expired**, whoever its owner (alive, on another host, a scheduler that runs for
   months, an app container whose hostname changed on restart): no rollout uses it any more;
2. when its owner is a process on this host, in this pid namespace, that is gone (a crash: no
   need to wait); a container that shares the host's name but not its pids can't tell;
3. with ``older_than_s``, when it is at least that old and its owner can't be checked here.

A leftover from before expiries were labelled is taken to expire `LEGACY_LIFETIME_S` after its
creation. ``older_than_s`` also spares every leftover younger than it, whatever the rules above.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rtax.substrates import kit
from rtax.substrates.base import Leftover, Substrate

#: How long the removal of one orphan may take, verification included (an EC2 instance's
#: termination takes the longest).
REMOVE_TIMEOUT_S = 300.0
#: The lifetime assumed for a leftover whose labels carry no expiry (made before expiries, or
#: outside a rollout): a day, longer than any rollout's deadline (rtax's defaults are 15 min
#: for the scheduler and 1 h for `rtax probe`).
LEGACY_LIFETIME_S = 24 * 3600.0


@dataclass(frozen=True)
class Orphan:
    substrate: str
    leftover: Leftover
    reason: str
    #: whether it was found by its expiry (rule 1) rather than its owner or age
    expired: bool = False
    #: why its removal failed (`reap` goes on with the others), None if removed or not tried
    error: str | None = None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _age_s(leftover: Leftover, now: datetime) -> float | None:
    created = _time(leftover.created_at)
    return None if created is None else (now - created).total_seconds()


def expiry(leftover: Leftover) -> tuple[datetime | None, bool]:
    """When `leftover` expires, and whether that is its label (False: assumed, for a leftover
    without one, from its creation + `LEGACY_LIFETIME_S`; None: not known at all)."""
    labelled = _time(leftover.expires_at)
    if labelled is not None:
        return labelled, True
    created = _time(leftover.created_at)
    if created is None:
        return None, False
    return created + timedelta(seconds=LEGACY_LIFETIME_S), False


def why_orphan(
    leftover: Leftover, *, older_than_s: float | None, now: datetime, host: str | None = None
) -> str | None:
    """The reason `leftover` is an orphan, or None if it must be left alone."""
    host = host or kit.owner_host()
    age = _age_s(leftover, now)
    if older_than_s is not None and (age is None or age < older_than_s):
        return None
    expires, labelled = expiry(leftover)
    if expires is not None and now >= expires:
        since = (now - expires).total_seconds()
        what = "expired" if labelled else "no expiry label; older than the assumed lifetime"
        return f"{what} {expires.isoformat(timespec='seconds')} ({since:.0f} s ago)"
    owner_host, _, pid_text = (leftover.owner or "").rpartition(":")
    if owner_host == host and pid_text.isdigit():
        if pid_alive(int(pid_text)):
            return None
        return f"owner pid {pid_text} is gone"
    if older_than_s is not None:
        return f"owner {leftover.owner or 'unknown'} not checkable here, older than limit"
    return None


def find_orphans(
    substrates: Iterable[Substrate],
    *,
    older_than_s: float | None = None,
    now: datetime | None = None,
    on_error: Callable[[str, Exception], None] | None = None,
) -> list[Orphan]:
    now = now or datetime.now(UTC)
    found = []
    for sub in substrates:
        try:
            leftovers = sub.leftovers()
        except Exception as exc:
            if on_error is None:
                raise
            on_error(sub.name, exc)  # e.g. a cloud with no credentials here: skip it, go on
            continue
        for leftover in leftovers:
            reason = why_orphan(leftover, older_than_s=older_than_s, now=now)
            if reason is not None:
                expires, _ = expiry(leftover)
                expired = expires is not None and now >= expires
                found.append(Orphan(sub.name, leftover, reason, expired=expired))
    return found


def reap(
    substrates: Iterable[Substrate],
    *,
    older_than_s: float | None = None,
    dry_run: bool = False,
    on_error: Callable[[str, Exception], None] | None = None,
    timeout_s: float = REMOVE_TIMEOUT_S,
    now: datetime | None = None,
) -> list[Orphan]:
    """Remove the orphans of `substrates` (unless `dry_run`) with each substrate's own
    `destroy`, the path a rollout's cleanup takes; return what was (or would be) removed.

    With `on_error`, a substrate whose leftovers can't be listed, or an orphan that can't be
    removed, is reported to it and the others are still visited (the orphan comes back with
    its `error`); without, the first error propagates. `now` (UTC) is when expiries are judged:
    a test or a fault suite can ask what the reaper will remove at a later time."""
    subs = {s.name: s for s in substrates}
    orphans = find_orphans(subs.values(), older_than_s=older_than_s, now=now, on_error=on_error)
    if dry_run:
        return orphans
    done = []
    for orphan in orphans:
        try:
            subs[orphan.substrate].destroy(orphan.leftover, timeout_s)
        except Exception as exc:
            if on_error is None:
                raise
            on_error(orphan.substrate, exc)
            orphan = dataclasses.replace(orphan, error=f"{type(exc).__name__}: {exc}")
        done.append(orphan)
    return done


def sweep(
    names: Iterable[str], build: Callable[[str], Substrate], log: logging.Logger
) -> list[Orphan]:
    """`reap` for a long-running process (the scheduler, at start and every `reap_interval`):
    each name's substrate built with `build`, every failure (building, listing, removing) a
    log line and never an exception, each orphan logged, the substrates closed after."""
    substrates = []
    for name in names:
        try:
            substrates.append(build(name))
        except Exception as exc:
            log.warning("reaper: cannot build %s: %s: %s", name, type(exc).__name__, exc)

    def skip(name: str, exc: Exception) -> None:
        log.warning("reaper: %s: %s: %s", name, type(exc).__name__, exc)

    try:
        orphans = reap(substrates, on_error=skip)
    finally:
        for substrate in substrates:
            with contextlib.suppress(Exception):  # releasing, not measuring
                substrate.close()
    said(orphans, log)
    return orphans


def said(orphans: Iterable[Orphan], log: logging.Logger, where: str = "") -> None:
    """One log line per orphan: reaped, or why not (`where`: e.g. " on a Ray node")."""
    for orphan in orphans:
        log.warning(
            "%s %s leftover %s (run %s)%s: %s",
            "could not reap" if orphan.error else "reaped",
            orphan.substrate,
            orphan.leftover.env_id,
            orphan.leftover.run_id,
            where,
            orphan.error or orphan.reason,
        )
