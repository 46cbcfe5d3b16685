"""What this run of the suite left on the Docker engine, told from what was already there.

Why: a suite killed part-way (a machine stopped, a CI job cancelled) leaves its containers on
the engine's disk, where the next run finds them under the same test names. A test that counts
every container of its name would then fail for a leak that is not its own, and keep failing
until someone cleans the engine by hand: a test that fails for the machine's history is a broken
test. So conftest records every container and image on the engine when the session starts
(`remember`), and a test's "nothing left" counts only what is new since (`new`). What an earlier
run left is still reported, once, at the end of the session (conftest), and left alone: it may
be a live probe's.
"""

from __future__ import annotations

import subprocess

from rtax.substrates.docker.substrate import SNAPSHOT_REPOSITORY

#: Short ids (12 hex) of every container and image on the engine when the session started.
BEFORE: set[str] = set()


def _ids(*args: str) -> list[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=True)
    return [line.strip()[:12] for line in done.stdout.splitlines() if line.strip()]


def remember() -> set[str]:
    """Record what is on the engine now (all containers, all images); returns the rtax
    containers and snapshot images among them."""
    BEFORE.update(_ids("ps", "-aq"))
    BEFORE.update(_ids("images", "-aq"))
    ids = _ids("ps", "-aq", "--filter", "label=rtax")
    ids += _ids("images", "-q", SNAPSHOT_REPOSITORY)  # the runner image is rtax's too: not these
    return set(ids)


def new(*args: str) -> str:
    """`docker <args>` (a listing of ids: ``ps -aq ...``, ``images -q ...``), one id a line,
    without the ids that were on the engine before the session: what this run made."""
    return "".join(f"{i}\n" for i in _ids(*args) if i not in BEFORE)
