"""The `local` substrate: a fresh working directory per rollout, commands through a shell.

Why it exists: it is the embedded default (no engine, no account) and the floor that every other
substrate is compared to: whatever a container or a VM adds on top of "a directory and a shell"
is that substrate's tax. Phases (docs/measurement.md): create = copy the preloaded template
into a new directory; orchestration = nothing to wait for; ready = the first `true`.

A floor must run the same programs as what stands on it: commands see the workload toolchain
(`rtax.assets.toolchain`, the same pinned wheels as the runner image, in a venv of the system's
interpreter) first on PATH, and an allow-listed environment shaped like a container's, never the
project's venv nor the scheduler's own variables (credentials included).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rtax.assets import toolchain
from rtax.core import paths
from rtax.core.failures import (
    CleanupFailed,
    CommandTimeout,
    CreateFailed,
    EnvironmentLost,
    ExecError,
)
from rtax.substrates import kit
from rtax.substrates.base import CommandResult, Environment, Leftover, clock

#: The system's standard folders, after the toolchain on every command's PATH (as in the image).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The label file written into every environment; its presence is what marks a leftover.
LABEL_FILE = ".rtax-env.json"
#: How long a folder named as an environment may go without a label before the reaper takes it
#: for one whose create or removal was killed half-way (`LocalSubstrate.leftovers`).
UNLABELLED_AFTER_S = 60.0
#: Every command's environment names its rtax environment here: what `destroy` kills is the
#: processes that carry it, never a process group id alone (an exited group's id can be reused
#: by an unrelated process).
ENV_MARKER = "RTAX_ENV_ID"


class LocalSubstrate:
    """Environments are directories under `root`, each a copy of `template`."""

    kind = "local"
    fidelity = "real"
    mode = "exec"
    #: environments are on this host
    host_address = "127.0.0.1"

    def __init__(
        self,
        name: str = "local",
        root: str | os.PathLike[str] | None = None,
        template: str | os.PathLike[str] | None = None,
        shell: str = "/bin/sh",
        toolchain: str | os.PathLike[str] | None = None,
    ) -> None:
        self.name = name
        self.root = Path(root) if root else paths.local_envs_dir()
        self.template = Path(template) if template else paths.fixtures_dir() / "template"
        self.shell = shell
        #: the toolchain's bin folder; None: the pinned one, built by `prepare` when missing
        self._toolchain = Path(toolchain) if toolchain else None
        self._base_env: dict[str, str] | None = None
        self._fingerprint: dict[str, Any] | None = None

    def toolchain_bin(self, log: Callable[[str], None] = print) -> Path:
        """The workload toolchain's bin folder (built once, outside any timed phase)."""
        if self._toolchain is None:
            self._toolchain = toolchain.ensure_local(log)
        return self._toolchain

    def command_env(self) -> dict[str, str]:
        """What commands see: an allow-list shaped like the runner image's environment.

        Nothing of this process's environment passes through (no credentials, no venv, no
        PYTHONPATH); PATH is the toolchain, then the system's standard folders."""
        if self._base_env is None:
            self._base_env = {
                **kit.command_env(),
                "PATH": os.pathsep.join([str(self.toolchain_bin()), SYSTEM_PATH]),
                # the image has no /etc/gitconfig; a host's must not change what git does here
                "GIT_CONFIG_NOSYSTEM": "1",
            }
        return self._base_env

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        workdir = self.root / f"rtax-{run_id}"
        label = kit.labels(run_id, self.name, lifetime_s)
        command_env = {**self.command_env(), "HOME": str(workdir), ENV_MARKER: str(workdir)}
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # The label goes in first, so that a copy interrupted half-way is still a leftover
            # that `rtax reap` finds.
            workdir.mkdir()
            _write_label(workdir, label)
            if self.template.is_dir():
                shutil.copytree(self.template, workdir, symlinks=True, dirs_exist_ok=True)
        except BaseException as exc:
            shutil.rmtree(workdir, ignore_errors=True)
            if isinstance(exc, OSError):
                raise CreateFailed(f"cannot make {workdir}: {exc}") from exc
            raise
        env = Environment(
            env_id=str(workdir), run_id=run_id, handle={"path": workdir, "env": command_env}
        )
        env.mark("created")
        return env

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        # A directory is "running" as soon as it exists; checking keeps the phase honest.
        if not env.handle["path"].is_dir():
            raise EnvironmentLost(f"{env.env_id} does not exist")
        env.mark("running")

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        t0 = clock()
        try:
            proc = subprocess.Popen(
                [self.shell, "-c", command],
                cwd=env.handle["path"],
                env=env.handle["env"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, so a timeout kills all of it
            )
        except FileNotFoundError as exc:
            if not env.handle["path"].is_dir():
                raise EnvironmentLost(f"{env.env_id} is gone") from exc
            raise ExecError(str(exc)) from exc
        except OSError as exc:
            raise ExecError(str(exc)) from exc
        try:
            out, err = kit.communicate(proc, max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.communicate()
            raise CommandTimeout(
                f"killed after {timeout_s:.3g} s (process group {proc.pid})"
            ) from None
        except BaseException:
            _kill_group(proc.pid)  # interrupted (Ctrl-C): never leave the command running
            proc.communicate()
            raise
        latency = clock() - t0
        return CommandResult(
            exit_code=proc.returncode,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            latency_s=latency,
        )

    def destroy(self, env: Environment, timeout_s: float) -> None:
        if env.handle is None:  # found by its label (or its name): remove only what is ours
            workdir = Path(env.env_id)
            if workdir.parent != self.root or not _ours(workdir):
                if not workdir.exists():
                    return
                raise CleanupFailed(f"{workdir} is not an rtax environment under {self.root}")
        else:
            workdir = env.handle["path"]
        # background processes a command left behind (a leftover's too: its scheduler died)
        if not _kill_marked(str(workdir), timeout_s):
            raise CleanupFailed(f"processes of {workdir} still start after {timeout_s:.3g} s")
        try:
            _remove_label_last(workdir)
        except FileNotFoundError:
            pass  # already gone: verified below
        except OSError as exc:
            raise CleanupFailed(f"cannot remove {workdir}: {exc}") from exc
        if workdir.exists():
            raise CleanupFailed(f"{workdir} still exists after removal")
        env.mark("removed")

    def leftovers(self) -> list[Leftover]:
        found: list[Leftover] = []
        if not self.root.is_dir():
            return found
        for child in sorted(self.root.iterdir()):
            try:
                label = json.loads((child / LABEL_FILE).read_text())
            except (OSError, ValueError):
                unlabelled = self._unlabelled(child)
                if unlabelled is not None:
                    found.append(unlabelled)
                continue  # not ours, or being made or removed right now
            if "run_id" in label:  # written by rtax before the kit's vocabulary
                label = {f"rtax.{key}": value for key, value in label.items()}
            if label.get(kit.SUBSTRATE, self.name) == self.name:
                found.append(kit.leftover(str(child), label))
        return found

    def _unlabelled(self, child: Path) -> Leftover | None:
        """A folder of ours that lost its label, or never got it: named ``rtax-<run id>``
        under this root, its label unreadable, and untouched for `UNLABELLED_AFTER_S` (a
        create writes its label within milliseconds, a removal takes the label last). What
        an rtax process killed at the wrong moment leaves; the reaper judges it by its age."""
        if not child.name.startswith("rtax-") or not child.is_dir():
            return None
        try:
            changed = child.stat().st_mtime
        except OSError:
            return None  # removed meanwhile
        if time.time() - changed < UNLABELLED_AFTER_S:
            return None
        # It expires the moment it is found: no rollout takes a minute between making its
        # folder and labelling it, and with no owner to check, an expiry is the only rule by
        # which a reaper without --older-than removes it (the CI fault suite's "local dirs 1").
        expired = datetime.fromtimestamp(changed + UNLABELLED_AFTER_S, UTC).isoformat()
        found = {
            kit.RUN_ID: child.name.removeprefix("rtax-"),
            kit.SUBSTRATE: self.name,
            kit.EXPIRES_AT: expired,
        }
        return kit.leftover(
            str(child), found, created_at=changed, detail="no label: made or removed half-way"
        )

    def prepare(self, log: Callable[[str], None]) -> None:
        if not self.template.is_dir():
            log(f"note: no template at {self.template}; environments start empty")
        self.toolchain_bin(log)
        self.toolchain_fingerprint()

    def toolchain_fingerprint(self) -> dict[str, Any]:
        """The toolchain as the workloads' ``python3`` sees it (asked once, then cached)."""
        if self._fingerprint is None:
            self._fingerprint = toolchain.fingerprint("python3", env=self.command_env())
        return self._fingerprint

    def close(self) -> None:
        """Nothing to release: every command's process ends with its call."""

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "endpoint": f"local://{socket.gethostname()}",
            "root": str(self.root),
            "template": str(self.template),
            "shell": self.shell,
            "toolchain": self.toolchain_fingerprint(),
        }


def _write_label(workdir: Path, label: dict[str, Any]) -> None:
    """The label written whole or not at all (a temporary file renamed over), so that a kill
    mid-write leaves no half label the reaper can't read."""
    part = workdir / f"{LABEL_FILE}.part"
    part.write_text(json.dumps(label))
    os.replace(part, workdir / LABEL_FILE)


def _remove_label_last(workdir: Path) -> None:
    """Everything in `workdir` but its label, then the label, then the folder: an rtax killed
    half-way leaves a folder that still says whose it is, and the reaper removes it."""
    for child in list(workdir.iterdir()):
        if child.name == LABEL_FILE:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    with contextlib.suppress(FileNotFoundError):
        (workdir / LABEL_FILE).unlink()
    workdir.rmdir()


def _ours(workdir: Path) -> bool:
    """Whether a folder found by the reaper is an rtax environment: labelled, or named as
    rtax names them (its label lost to a kill mid-removal)."""
    return (workdir / LABEL_FILE).is_file() or workdir.name.startswith("rtax-")


def _kill_marked(env_id: str, timeout_s: float) -> bool:
    """SIGKILL every process whose environment carries ``RTAX_ENV_ID=env_id``, until a pass
    finds none and none whose environment can't be told yet; False if that takes longer than
    `timeout_s` (some keep starting).

    Why the marker and not the process groups: a command's group id outlives the command only
    as a number, which the kernel may give to an unrelated process later; the marker is
    inherited by whatever the command started, in any group or session. Each process is
    signalled through a pidfd opened before its environment is read, so a pid reused between
    the read and the kill is never hit."""
    wanted = f"{ENV_MARKER}={env_id}".encode()
    deadline = clock() + max(timeout_s, 1.0)
    while True:
        found = unsure = False
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            if pid == os.getpid():
                continue
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue  # exited meanwhile
            try:
                if os.getuid() and os.stat(f"/proc/{pid}").st_uid != os.getuid():
                    continue  # commands run as this user; another's environment is unreadable
                with open(f"/proc/{pid}/environ", "rb") as file:
                    environ = file.read()
                if not environ:
                    unsure = unsure or _mid_exec(pid)
                elif wanted in environ.split(b"\0"):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    found = True
            except OSError:
                continue  # exited meanwhile
            finally:
                os.close(pidfd)
        if not (found or unsure):
            return True
        if clock() > deadline:
            return False


def _mid_exec(pid: int) -> bool:
    """Whether a process shows no environment only because it is inside `execve` (its new
    memory has no environment block yet: env_end, field 51 of /proc/PID/stat, is 0), rather
    than being a kernel thread, a zombie, or started with an empty environment."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    kernel_thread = int(fields[6]) & 0x00200000  # PF_KTHREAD
    return fields[0] not in (b"Z", b"X") and not kernel_thread and fields[48] == b"0"


def _kill_group(pgid: int) -> None:
    """SIGKILL a whole process group; it may already be gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
