"""What runs beside the rollouts while faults are injected: the scheduler's logs followed, the
dashboard's readers polling, and the environments of running commands searched for secrets.

Why (docs/faults.md): the suite's figures come from what the product itself says and does (its
log lines, its dashboard readers, its commands' environments), observed from outside the
scheduler process, so a SIGKILLed scheduler can't take its own evidence with it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from pathlib import Path

from rtax.faultsuite import tally
from rtax.faultsuite.dockerd import PrivateEngine

log = logging.getLogger(__name__)


class LogFollower:
    """Follows every scheduler log the suite writes (one per scheduler start)."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self._offsets: dict[Path, int] = {}
        self._tails: dict[Path, str] = {}
        self.finished: dict[str, str] = {}
        self.locked = 0
        self.lines: list[str] = []

    def add(self, path: Path) -> None:
        self.paths.append(path)

    def poll(self) -> None:
        for path in self.paths:
            try:
                with path.open("r", errors="replace") as src:
                    src.seek(self._offsets.get(path, 0))
                    text = src.read()
                    self._offsets[path] = src.tell()
            except FileNotFoundError:
                continue
            text = self._tails.pop(path, "") + text
            lines = text.split("\n")
            self._tails[path] = lines.pop()  # an unfinished line waits for its end
            self.finished.update(tally.finished_runs(lines))
            self.locked += sum(tally.LOCKED in line for line in lines)
            self.lines.extend(line for line in lines if " ERROR " in line or " WARNING " in line)


class DashboardReaders:
    """`threads` pollers reading through the dashboard's own cached readers (cleared before
    every read, so each poll reaches the database), counting what surfaces."""

    def __init__(self, database: Path, stop: threading.Event, threads: int = 2) -> None:
        self.database = str(database)
        self.stop = stop
        self.polls = 0
        self.locked = 0
        self.errors: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._poll, daemon=True, name=f"reader-{i}")
            for i in range(threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=30)

    def _poll(self) -> None:
        from rtax.dashboard import data

        # outside `streamlit run` every cached call warns that there is no runtime
        logging.getLogger("streamlit.runtime.caching.cache_data_api").setLevel(logging.ERROR)
        key: data.FilterKey = (None, (), (), (), ())
        readers = (data.runs, data.counts, data.options, data.spend_today)
        while not self.stop.wait(0.25):  # a reader's refresh pace, not a synchronisation
            try:
                for reader in readers:
                    reader.clear()
                data.runs(self.database, key)
                data.counts(self.database, key)
                data.options(self.database)
                data.spend_today(self.database)
                with self._lock:
                    self.polls += 1
            except Exception as exc:
                with self._lock:
                    if tally.LOCKED in str(exc):
                        self.locked += 1
                    else:
                        self.errors[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1


class EnvironmentSearch:
    """Every second, the environments of the local substrate's running commands (processes
    whose working directory is under `local_root`) and of the engine's rtax containers,
    searched for the planted secrets; counts each process or container once."""

    def __init__(
        self, local_root: Path, engine: PrivateEngine, secrets: list[str], stop: threading.Event
    ) -> None:
        self.local_root = str(local_root)
        self.engine = engine
        self.secrets = [s.encode() for s in secrets]
        self.stop = stop
        self.local_hits: set[int] = set()
        self.container_hits: set[str] = set()
        self._thread = threading.Thread(target=self._run, daemon=True, name="env-search")

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self.stop.wait(1.0):  # a sampling pace, not a synchronisation
            try:
                self._local()
                self._containers()
            except Exception as exc:  # the engine restarting, a process gone: next round
                log.debug("environment search: %s", exc)

    def _local(self) -> None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if not os.readlink(f"/proc/{pid}/cwd").startswith(self.local_root):
                    continue
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                ppid = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1]
                parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
            except (OSError, IndexError):
                continue
            # A child between fork and exec still shows its parent's memory (the scheduler's
            # environment); only a command that has been exec'd is what a command sees.
            if cmdline == parent:
                continue
            if any(s in environ for s in self.secrets) and int(pid) not in self.local_hits:
                self.local_hits.add(int(pid))
                log.warning("a planted secret in the environment of local command %r", cmdline)

    def _containers(self) -> None:
        ids = self.engine.containers("label=rtax", "status=running")
        if not ids:
            return
        done = self.engine.docker("inspect", "--format", "{{.Id}} {{json .Config.Env}}", *ids)
        for line in done.stdout.splitlines():
            cid, _, env = line.partition(" ")
            if any(s.decode() in env for s in self.secrets) and cid not in self.container_hits:
                self.container_hits.add(cid)
                log.warning("a planted secret in the environment of container %s", cid[:12])


def search_files(paths: list[Path], secrets: list[str]) -> dict[str, int]:
    """file name -> occurrences of any planted secret, over every file under `paths`."""
    needles = [s.encode() for s in secrets]
    found: dict[str, int] = {}
    for top in paths:
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]
        for path in files:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            hits = sum(data.count(n) for n in needles)
            if hits:
                found[path.name] = found.get(path.name, 0) + hits
    return found
