"""``rtax health``: is this deployment healthy? The dashboard answers, and a scheduler holds its
database's lock (docs/container.md).

Why the lock and not a pid or a heartbeat: the scheduler's flock (`rtax.service.lock`) is
dropped by the kernel however the process dies, so "can I take it?" is an honest "is one
running?" that the app image's healthcheck can ask without any state of its own.
"""

from __future__ import annotations

from pathlib import Path

from rtax.service.lock import LockHeld, SchedulerLock


def health(url: str, config_path: Path | None = None) -> list[str]:
    """What is wrong with a deployment (docs/container.md): the dashboard at `url` does not
    answer ``ok``, or no scheduler holds the lock of the configured database. Empty: healthy."""
    import urllib.request

    from rtax.settings import config

    problems = []
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            if answer.read().strip() != b"ok":
                problems.append(f"dashboard at {url} did not answer ok")
    except OSError as exc:
        problems.append(f"dashboard at {url}: {exc}")
    try:
        lock = SchedulerLock(config.load(config_path).database)
        lock.acquire()  # we got it: no scheduler holds it
        lock.release()
        problems.append("no scheduler holds the database lock")
    except LockHeld:
        pass  # a scheduler is running
    except config.ConfigError as exc:
        problems.append(f"configuration: {exc.problems[0]}")
    except OSError as exc:
        problems.append(f"cannot check the scheduler lock: {exc}")
    return problems
