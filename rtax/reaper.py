"""The orphan reaper: remove environments labelled rtax that no live run owns.

Why: the probe runner's own cleanup is the first line, but a crashed or SIGKILLed process leaves
its environment behind, and a leaked container costs memory (or, on a cloud, money). Every rtax
environment records its owner as "host:pid". A leftover is an orphan when its owner is a process
on this host that is gone. Owners on other hosts can't be checked from here, so their leftovers
are reaped only when ``older_than_s`` is given and they are older than that; that age bound also
applies to every orphan (docs/substrates/docker.md#reaper).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from rtax.substrates.base import Leftover, Substrate

#: How long the removal of one orphan may take, verification included (an EC2 instance's
#: termination takes the longest).
REMOVE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Orphan:
    substrate: str
    leftover: Leftover
    reason: str


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _age_s(leftover: Leftover, now: datetime) -> float | None:
    if not leftover.created_at:
        return None
    try:
        created = datetime.fromisoformat(leftover.created_at)
    except ValueError:
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return (now - created).total_seconds()


def why_orphan(
    leftover: Leftover, *, older_than_s: float | None, now: datetime, host: str | None = None
) -> str | None:
    """The reason `leftover` is an orphan, or None if it must be left alone."""
    host = host or socket.gethostname()
    age = _age_s(leftover, now)
    if older_than_s is not None and (age is None or age < older_than_s):
        return None
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
                found.append(Orphan(sub.name, leftover, reason))
    return found


def reap(
    substrates: Iterable[Substrate],
    *,
    older_than_s: float | None = None,
    dry_run: bool = False,
    on_error: Callable[[str, Exception], None] | None = None,
    timeout_s: float = REMOVE_TIMEOUT_S,
) -> list[Orphan]:
    """Remove the orphans of `substrates` (unless `dry_run`) with each substrate's own
    `destroy`, the path a rollout's cleanup takes; return what was (or would be) removed.
    With `on_error`, a substrate whose leftovers can't be listed is reported to it and
    skipped; without, the error propagates."""
    subs = {s.name: s for s in substrates}
    orphans = find_orphans(subs.values(), older_than_s=older_than_s, on_error=on_error)
    if not dry_run:
        for orphan in orphans:
            subs[orphan.substrate].destroy(orphan.leftover, timeout_s)
    return orphans
