"""The state a snapshot is taken with, and the check that a restored environment still holds it.

Two halves, because a restore can lose either: a file (the environment's disk) and a value held
in the memory of the environment's first process (its processes). Plain POSIX shell, so that
any kind that snapshots can use them (docs/measurement.md#launch-paths): the kind starts its
snapshottable environments with `holder_command` as their first process, the restore path
writes the file with `mark_command` and checks both with `check_command`.

A kind whose snapshots keep the files alone (a filesystem snapshot, as Daytona's: see
`rtax.substrates.base.snapshot_keeps_memory`) is checked with `check_file_command`: asking for a
memory its snapshots can't keep would fail every restore, and faking the answer would be worse,
so only the half the snapshot holds is checked, and the run's provenance says which.
"""

from __future__ import annotations

#: Where a restored environment's state check finds the value its PID 1 holds in memory.
STATE_MEMORY = "/tmp/.rtax-state-memory"
#: The file the snapshot's environment wrote before it was taken.
STATE_FILE = "/work/.rtax-state"


def holder_command(token: str) -> list[str]:
    """PID 1 of a snapshottable container: keeps `token` in a shell variable (its memory) and
    writes it to `STATE_MEMORY` on SIGUSR1, else sleeps. ``wait`` returns on a signal at once,
    so the answer comes as soon as it is asked for."""
    script = (
        f"v=$0; trap 'echo \"$v\" > {STATE_MEMORY}' USR1; "
        "while :; do sleep 3600 & s=$!; wait $s; kill $s 2>/dev/null; done"
    )
    return ["sh", "-c", script, token]


def mark_command(token: str) -> str:
    """The command that writes the file half of the state, before the snapshot."""
    return f"echo {token} > {STATE_FILE}"


def check_command() -> str:
    """The state check run in a restored environment: ask PID 1 for its value (polling for
    its answer for up to 10 s), then print both halves as ``file=... memory=...``."""
    return (
        f"rm -f {STATE_MEMORY}; kill -USR1 1 && "
        f"for i in $(seq 1000); do [ -s {STATE_MEMORY} ] && break; sleep 0.01; done; "
        f'echo "file=$(cat {STATE_FILE} 2>/dev/null) memory=$(cat {STATE_MEMORY} 2>/dev/null)"'
    )


def expected(file_token: str, memory_token: str) -> str:
    """What `check_command` prints in an environment that holds the snapshot's state."""
    return f"file={file_token} memory={memory_token}"


def check_file_command() -> str:
    """The state check of a restored environment whose snapshot keeps no memory: the file
    half alone, printed as ``file=...``. It signals no process: PID 1 there is not
    `holder_command` (the kind's own init, which a stray SIGUSR1 could end)."""
    return f'echo "file=$(cat {STATE_FILE} 2>/dev/null)"'


def expected_file(file_token: str) -> str:
    """What `check_file_command` prints in an environment that holds the snapshot's file."""
    return f"file={file_token}"
