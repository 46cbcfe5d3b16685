"""The `docker` substrate: one container per rollout, through the Docker Engine API.

Why these choices (docs/substrates/docker.md):

- The low-level `docker.APIClient`, one HTTP call per step, so that a phase is the engine's
  time and not the SDK's extra inspections.
- Two action modes (`runs.mode`): ``exec``, one Docker exec per action (what most harnesses
  do), and ``session``, one persistent shell per container (`rtax.substrates.docker.session`).
- A command's timeout is enforced inside the container (`kit.timeout_argv`), so a hung action
  stops where it runs; the API call's own timeout is only a backstop.
- The engine is a local socket with no rate limit: nothing is retried; a 429 (a registry that
  throttles a pull) is ``rate_limited`` at once.
- gVisor is the same kind with ``runtime="runsc"`` (the built-in ``docker-gvisor`` name).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
from collections.abc import Callable
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

from rtax.assets.image import RUNNER_IMAGE
from rtax.core import checks
from rtax.core.failures import (
    CleanupFailed,
    CreateFailed,
    CreateTimeout,
    EnvironmentLost,
    ExecError,
    RateLimited,
    ReadyTimeout,
    SnapshotGone,
    SubstrateError,
)
from rtax.substrates import kit, state
from rtax.substrates.base import CommandResult, Environment, Leftover, clock
from rtax.substrates.docker import daemon, snapshot

MODES = ("exec", "session")
#: The engine is a local socket with no rate limit and an inspect costs about a millisecond of
#: its time, so a removal is polled every 10 ms: a resolution well under 5 % of a container
#: start (docs/measurement.md#resolution). The poll usually succeeds at once (a forced removal
#: mostly finishes before it answers), and then the resolution is 0.
POLL_INTERVAL_S = 0.01
#: The repository of the images committed for snapshots (`DockerSubstrate.snapshot`).
SNAPSHOT_REPOSITORY = "rtax-snapshot"
#: Margin of an exec's API call past the command's timeout (`kit.call_timeout`).
EXEC_MARGIN_S = 30.0


def _docker() -> Any:
    import docker  # imported on first use: the registry stays cheap for other substrates

    return docker


class DockerSubstrate:
    """Containers from `image`, one per rollout, with CPU/memory limits, network and runtime.
    `host_address` (where containers reach this host) defaults to the network's gateway."""

    kind = "docker"
    fidelity = "real"

    def __init__(
        self,
        name: str = "docker",
        image: str = RUNNER_IMAGE,
        runtime: str | None = None,
        cpus: float | None = 1.0,
        memory: str | None = "1g",
        network: str = "bridge",
        mode: str = "exec",
        base_url: str | None = None,
        host_address: str | None = None,
        api_timeout_s: float = 3600.0,
        create_timeout_s: float = 120.0,
        snapshot_runtime: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.name = name
        self.image = image
        self.runtime = runtime
        self.cpus = cpus
        self.memory = memory
        self.network = network
        self.mode = mode
        self.base_url = base_url
        if host_address is not None:
            self.host_address = host_address  # configured: the gateway is not asked
        self.api = daemon.engine_client(base_url, api_timeout_s)
        self.create_timeout_s = create_timeout_s
        #: the runtime of snapshottable containers (None: `runtime`); gVisor's must run with
        #: --network=none, runsc refusing to checkpoint a sandbox on the host's network
        self.snapshot_runtime = snapshot_runtime or runtime
        self._engine_info: dict[str, Any] | None = None
        self._runtime_provenance: dict[str, Any] | None = None

    @cached_property
    def host_address(self) -> str:
        """Where a container reaches this host: the network's gateway, asked once."""
        return daemon.gateway_address(self.api, self.network)

    # -- life of one environment ------------------------------------------------------------

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        return self._create(run_id, lifetime_s)

    def _create(
        self,
        run_id: str,
        lifetime_s: float | None,
        *,
        image: str | None = None,
        command: list[str] | None = None,
        snapshottable: bool = False,
    ) -> Environment:
        """A container of `image` (the substrate's) running `command` (``sleep infinity``);
        a `snapshottable` one runs on the snapshot runtime without ``--init``
        (`rtax.substrates.docker.snapshot`)."""
        errors = _docker().errors
        host_config = self.api.create_host_config(
            nano_cpus=int(self.cpus * 1e9) if self.cpus else None,
            mem_limit=self.memory,
            network_mode=self.network,
            # PID 1 reaps what timed-out commands leave behind; CRIU can't restore docker-init
            init=not snapshottable,
            # (create_container's own `runtime` is not sent by the SDK)
            runtime=self.snapshot_runtime if snapshottable else self.runtime,
        )
        name = f"rtax-{run_id}"
        try:
            with self._call_timeout(self.create_timeout_s):
                created = self.api.create_container(
                    image or self.image,
                    command=command or ["sleep", "infinity"],
                    labels=kit.labels(run_id, self.name, lifetime_s),
                    host_config=host_config,
                    working_dir="/work",
                    name=name,
                    # the allow-list, and not the client config's proxies (which may carry
                    # credentials): execs inherit exactly this
                    environment=kit.command_env(),
                    use_config_proxy=False,
                )
        except errors.ImageNotFound as exc:
            raise CreateFailed(
                f"image {image or self.image} not found (run: rtax image build)"
            ) from exc
        except BaseException as exc:
            # The engine may have made the container before the answer was lost or turned
            # into an error (a transport timeout, a 500 after the create, Ctrl-C): remove it by
            # its name, so that nothing outlives the rollout. A 4xx refused it: nothing to do
            # (and a 409 names a container that is not this request's).
            api_error = isinstance(exc, errors.APIError)
            if not (api_error and (getattr(exc, "status_code", None) or 500) < 500):
                self._remove_quietly(name)
            if isinstance(exc, errors.APIError):
                raise _classify(exc, CreateFailed) from exc
            if isinstance(exc, _transport_errors()):
                raise CreateTimeout(f"container create: {exc}") from exc
            raise
        env = Environment(env_id=created["Id"], run_id=run_id, handle={"id": created["Id"]})
        env.mark("created")
        return env

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        self._start(env, timeout_s, lambda: self.api.start(env.env_id))

    def _start(self, env: Environment, timeout_s: float, start: Callable[[], None]) -> None:
        """`start` the container: the engine answers once its process runs, so the answer is
        the end of orchestration (its resolution 0). No inspect follows, as no harness makes
        one: the first command proves it runs (a container that exited at once fails it as
        ``environment_lost``), and an extra call would be tax rtax adds, not the substrate's."""
        errors = _docker().errors
        cid = env.env_id
        try:
            with self._call_timeout(timeout_s):
                start()
        except errors.NotFound as exc:
            raise EnvironmentLost(f"container {cid[:12]} vanished at start") from exc
        except errors.APIError as exc:
            raise _classify(exc, CreateFailed) from exc
        except _transport_errors() as exc:
            raise ReadyTimeout(f"container start: {exc}") from exc
        env.resolved("orchestration", 0.0)
        env.mark("running")

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        if self.mode == "session":
            result = self._session(env).run(command, timeout_s)
        else:
            result = self._exec(env, command, timeout_s)
        return kit.first_command(env, result)

    def _exec(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        errors = _docker().errors
        argv = kit.timeout_argv(command, timeout_s)
        t0 = clock()
        try:
            with self._call_timeout(kit.call_timeout(timeout_s, EXEC_MARGIN_S)):
                exec_id = self.api.exec_create(env.env_id, argv, workdir="/work")["Id"]
                out, err = self.api.exec_start(exec_id, demux=True)
                code = self.api.exec_inspect(exec_id)["ExitCode"]
        except errors.NotFound as exc:
            raise EnvironmentLost(f"container {env.env_id[:12]} is gone") from exc
        except errors.APIError as exc:
            if exc.status_code == 409:  # "container ... is not running"
                raise EnvironmentLost(str(exc.explanation)) from exc
            raise _classify(exc, ExecError) from exc
        except _transport_errors() as exc:
            raise ExecError(f"exec: {exc}") from exc
        latency = clock() - t0
        kit.raise_if_timed_out(code, latency, timeout_s)
        if code is None:
            raise ExecError("exec finished without an exit code")
        return CommandResult(
            code,
            (out or b"").decode("utf-8", "replace"),
            (err or b"").decode("utf-8", "replace"),
            latency,
        )

    def _session(self, env: Environment) -> Any:
        from rtax.substrates.docker.session import ShellSession

        session = env.handle.get("session")
        if session is None or session.closed:
            session = ShellSession.open(self.api, env.env_id)
            env.handle["session"] = session
            env.mark("session_opened")
        return session

    def destroy(self, env: Environment, timeout_s: float) -> None:
        errors = _docker().errors
        session = env.handle.get("session") if isinstance(env.handle, dict) else None
        if session is not None:
            session.close()
        try:
            with self._call_timeout(timeout_s):
                if isinstance(env, Leftover) and env.frozen:
                    with contextlib.suppress(errors.APIError):  # thawed already: removed below
                        self.api.unpause(env.env_id)
                try:
                    self.api.remove_container(env.env_id, force=True)
                except errors.APIError as exc:
                    if not self._thawed(env, exc):
                        raise
                    self.api.remove_container(env.env_id, force=True)
        except errors.NotFound:
            pass  # already gone: verified below
        except errors.APIError as exc:
            raise CleanupFailed(f"remove {env.env_id[:12]}: {exc.explanation}") from exc
        except _transport_errors() as exc:
            raise CleanupFailed(f"remove {env.env_id[:12]}: {exc}") from exc
        deadline = clock() + timeout_s

        def gone() -> bool | None:
            # removal is asynchronous for a dying container: poll, bounded by the deadline
            try:
                with self._call_timeout(max(deadline - clock(), 1.0)):
                    self.api.inspect_container(env.env_id)
            except errors.NotFound:
                return True
            except (errors.APIError, *_transport_errors()) as exc:
                raise CleanupFailed(f"verify removal of {env.env_id[:12]}: {exc}") from exc
            return None

        kit.confirm_removed(
            env,
            gone,
            interval_s=POLL_INTERVAL_S,
            deadline=deadline,
            still_there=lambda: CleanupFailed(
                f"container {env.env_id[:12]} still exists after removal"
            ),
        )
        restored = env.handle.get("restore_id") if isinstance(env.handle, dict) else None
        if restored or (isinstance(env, Leftover) and env.run_id):
            # containerd's copy of a restore's checkpoint outlives its container
            # (`snapshot.remove_unpacked`); a leftover may be a crashed run's restore
            snapshot.remove_unpacked(str(restored or env.run_id))

    # -- snapshots and pauses (rtax.substrates.base.Snapshots, Pauses) ----------------------

    def snapshot_support(self, needs_network: bool) -> str | None:
        """Why this substrate can't snapshot a workload (None: it can): restore places the
        checkpoint under the engine's data root, so the engine must be local; gVisor's
        checkpointable runtime has no network, so a set-up that fetches over one can't run
        in it (what it needs can be copied in instead: `copy_in`)."""
        if self.api.base_url != "http+docker://localhost":
            return f"restore needs the engine's data root on this host ({self.api.base_url})"
        registered = self._info().get("Runtimes") or {}
        runtime = self.snapshot_runtime or str(self._info().get("DefaultRuntime") or "runc")
        if runtime not in registered:
            return f"the engine has no runtime {runtime!r} (scripts/ensure-docker.sh registers it)"
        if not self._info().get("ExperimentalBuild"):
            return 'the engine\'s checkpoint API needs "experimental": true (make docker)'
        if self._gvisor(runtime) and needs_network:
            return (
                f"{runtime} runs with --network=none (runsc refuses to checkpoint a sandbox on "
                "the host's network), so a set-up that clones over the network can't run in it"
            )
        return None

    def snapshot_source(self, run_id: str, *, token: str, lifetime_s: float) -> Environment:
        """A cold, running container made to be snapshotted: its PID 1 holds `token` in
        memory (`snapshot.holder_command`)."""
        env = self._create(
            run_id, lifetime_s, command=state.holder_command(token), snapshottable=True
        )
        try:
            self.wait_running(env, self.create_timeout_s)
        except BaseException:
            self._remove_quietly(env.env_id)
            raise
        return env

    def copy_in(self, env: Environment, folder: Path, into: str) -> None:
        """`CopiesIn.copy_in`: `folder` as ``into/<its name>`` through the engine's archive
        upload, which writes the container's files from the host: a container without a
        network (gVisor's snapshottable one) gets what its set-up reads. The engine makes
        the missing parents of `into`."""
        errors = _docker().errors
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.add(folder, arcname=f"{into.strip('/')}/{folder.name}")
        try:
            with self._call_timeout(self.create_timeout_s):
                self.api.put_archive(env.env_id, "/", archive.getvalue())
        except errors.NotFound as exc:
            raise EnvironmentLost(f"container {env.env_id[:12]} is gone") from exc
        except (errors.APIError, *_transport_errors()) as exc:
            raise SubstrateError(f"copy {folder.name} into {env.env_id[:12]}: {exc}") from exc

    def snapshot(self, env: Environment, into: str) -> dict[str, Any]:
        """Checkpoint `env` into `into` (it stops), committing its files first where the
        checkpoint doesn't hold them (runc); the caller destroys `env`."""
        errors = _docker().errors
        folder = Path(into)
        session = env.handle.get("session")
        if session is not None:  # an attached shell is a host connection no dump can keep
            session.close()
        gvisor = self._gvisor(self.snapshot_runtime)
        try:
            with self._call_timeout(self.create_timeout_s):
                image = (
                    self.image
                    if gvisor
                    # tagged with the snapshot's own name: under one shared tag, another
                    # restore path's commit would leave this one's image untagged
                    else self.api.commit(
                        env.env_id, repository=SNAPSHOT_REPOSITORY, tag=folder.name
                    )["Id"]
                )
                snapshot.checkpoint(self.api, env.env_id, folder)
        except errors.APIError as exc:
            raise CreateFailed(f"snapshot of {env.env_id[:12]}: {exc.explanation}") from exc
        return {
            "image": image,
            "committed": not gvisor,
            "dir": str(folder),
            "runtime": self.snapshot_runtime,
            "size_bytes": snapshot.size_of(folder),
        }

    def restore(self, snap: dict[str, Any], run_id: str, *, lifetime_s: float) -> Environment:
        """A new container from `snap`: created from its image, the checkpoint placed in its
        folder, started from it, until the engine says it runs."""
        errors = _docker().errors
        then = "(removed outside rtax): the next rollout makes a new snapshot"
        if not Path(snap["dir"]).is_dir():
            raise SnapshotGone(f"snapshot {Path(snap['dir']).name}: its checkpoint is gone {then}")
        try:
            env = self._create(run_id, lifetime_s, image=str(snap["image"]), snapshottable=True)
        except CreateFailed as exc:
            if isinstance(exc.__cause__, errors.ImageNotFound):
                raise SnapshotGone(
                    f"snapshot {Path(snap['dir']).name}: its image {str(snap['image'])[:19]} "
                    f"is gone {then}"
                ) from exc
            raise
        try:
            root = str(self._info().get("DockerRootDir") or "/var/lib/docker")
            snapshot.place(root, env.env_id, Path(snap["dir"]), run_id)
            env.handle["restore_id"] = run_id
            env.mark("placed")
            self._start(
                env, self.create_timeout_s, lambda: snapshot.start_from(self.api, env.env_id)
            )
        except errors.APIError as exc:
            self._remove_quietly(env.env_id, restore_id=run_id)
            raise CreateFailed(f"restore: {exc.explanation}") from exc
        except BaseException:
            self._remove_quietly(env.env_id, restore_id=run_id)
            raise
        return env

    def forget(self, snap: dict[str, Any]) -> None:
        """Remove a snapshot's checkpoint files and the image committed for it; an image the
        engine refuses to remove is an error (the restore path logs it), one already gone is
        not."""
        shutil.rmtree(str(snap.get("dir") or ""), ignore_errors=True)
        if snap.get("committed"):
            with contextlib.suppress(_docker().errors.NotFound), self._call_timeout(60):
                self.api.remove_image(str(snap["image"]), force=True)

    def pause(self, env: Environment) -> None:
        """Freeze every process of `env` (the cgroup freezer: ``docker pause``)."""
        self._freezer(env, self.api.pause, "pause")

    def unpause(self, env: Environment) -> None:
        """Thaw `env`: its processes run again where they stopped."""
        self._freezer(env, self.api.unpause, "unpause")

    def memory_bytes(self, env: Environment) -> int | None:
        """`Weighs.memory_bytes`: the engine's one-shot stats (no second sample for a CPU
        rate), usage less the inactive page cache, as ``docker stats`` computes it: a file
        read once stays cached, and the kernel drops it before it would fail an allocation.
        None when the engine reports no usage (a runtime without cgroup statistics)."""
        errors = _docker().errors
        try:
            with self._call_timeout(self.create_timeout_s):
                stats = self.api.stats(env.env_id, stream=False, one_shot=True)
        except errors.NotFound as exc:
            raise EnvironmentLost(f"container {env.env_id[:12]} is gone") from exc
        except (errors.APIError, *_transport_errors()) as exc:
            raise SubstrateError(f"stats of {env.env_id[:12]}: {exc}") from exc
        return held_memory(stats.get("memory_stats") or {})

    def _freezer(self, env: Environment, call: Callable[[str], None], what: str) -> None:
        errors = _docker().errors
        try:
            with self._call_timeout(self.create_timeout_s):
                call(env.env_id)
        except errors.NotFound as exc:
            raise EnvironmentLost(f"container {env.env_id[:12]} is gone") from exc
        except errors.APIError as exc:
            raise _classify(exc, CreateFailed) from exc
        except _transport_errors() as exc:
            raise CreateTimeout(f"{what}: {exc}") from exc

    def _gvisor(self, runtime: str | None) -> bool:
        entry = (self._info().get("Runtimes") or {}).get(runtime or "runc") or {}
        return "runsc" in os.path.basename(str(entry.get("path") or ""))

    def _thawed(self, env: Environment, exc: Exception) -> bool:
        """After a refused removal: whether `env` was frozen (a resume pool's, found by the
        reaper) and is thawed now. A frozen gVisor container can't be killed ("Could not kill
        running container"), so its removal is tried again once thawed; asked only then, so a
        normal cleanup makes no extra call."""
        if isinstance(exc, _docker().errors.NotFound):
            return False
        try:
            if not self.api.inspect_container(env.env_id)["State"].get("Paused"):
                return False
            self.api.unpause(env.env_id)
        except _docker().errors.APIError:
            return False
        return True

    def leftovers(self) -> list[Leftover]:
        # Only this substrate's own (docker and docker-gvisor share an engine).
        wanted = [f"{key}={value}" for key, value in kit.selector(self.name).items()]
        return [
            kit.leftover(
                c["Id"],
                c.get("Labels") or {},
                created_at=c.get("Created"),
                detail=f"{self.name}, {c.get('State')}",
                frozen=c.get("State") == "paused",
            )
            for c in self.api.containers(all=True, filters={"label": wanted})
        ]

    def _remove_quietly(self, ref: str, restore_id: str | None = None) -> None:
        """Force-remove a container by id or name, ignoring every error (best effort), and
        containerd's copy of its checkpoint when it was a restore that failed."""
        with contextlib.suppress(Exception), self._call_timeout(60):
            self.api.remove_container(ref, force=True)
        if restore_id is not None:
            with contextlib.suppress(OSError):
                snapshot.remove_unpacked(restore_id)

    def _call_timeout(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        """Bound this thread's engine calls inside to `seconds` (`daemon.call_timeout`:
        the client is shared by threads, so nothing is set on it)."""
        return daemon.call_timeout(seconds)

    # -- around rollouts ----------------------------------------------------------------------

    def prepare(self, log: Callable[[str], None]) -> None:
        """Build the runner image when it is the one configured and it is missing or stale."""
        if self.image == RUNNER_IMAGE:
            from rtax.assets.image import ensure_runner

            ensure_runner(log=log)
            self.toolchain_fingerprint()
        else:
            try:
                self.api.inspect_image(self.image)
            except _docker().errors.ImageNotFound:
                raise CreateFailed(f"image {self.image} is not on this engine") from None

    def close(self) -> None:
        """Close the engine client's connection pool."""
        self.api.close()

    def _info(self) -> dict[str, Any]:
        """The engine's `docker info`, asked once per substrate (it names runtimes and defaults,
        which don't change under a running probe without a daemon reload)."""
        if self._engine_info is None:
            self._engine_info = dict(self.api.info())
        return self._engine_info

    def runtime_provenance(self) -> dict[str, Any]:
        """The runtime in use as the engine runs it (`daemon.runtime_provenance`), asked
        once: it costs a `docker info` and two runsc calls."""
        if self._runtime_provenance is None:
            # The runtime's binary can only be asked where the engine runs: a local socket.
            local = self.api.base_url == "http+docker://localhost"
            self._runtime_provenance = daemon.runtime_provenance(
                self._info(), self.runtime, daemon.run_binary if local else None
            )
        return self._runtime_provenance

    def describe(self) -> dict[str, Any]:
        version = self.api.version()
        try:
            image = self.api.inspect_image(self.image)
            image_id, digests = image["Id"], image.get("RepoDigests") or []
        except _docker().errors.ImageNotFound:
            image_id, digests = None, []
        return {
            "kind": self.kind,
            "endpoint": self.api.base_url,
            "engine_version": version.get("Version"),
            "api_version": version.get("ApiVersion"),
            "image": self.image,
            "image_id": image_id,
            "image_digests": digests,
            "toolchain": self.toolchain_fingerprint(image_id),
            "runtime": self.runtime or str(self._info().get("DefaultRuntime") or "runc"),
            "runtime_config": self.runtime_provenance(),
            "cpus": self.cpus,
            "memory": self.memory,
            "network": self.network,
            "mode": self.mode,
            "client": {"docker": metadata.version("docker")},
        }

    def toolchain_fingerprint(self, image_id: str | None = None) -> dict[str, Any] | None:
        """The image's workload toolchain (`daemon.image_toolchain`, docs/toolchain.md),
        outside any timed phase: provenance is taken before a rollout's clock starts."""
        if image_id is None:
            try:
                image_id = self.api.inspect_image(self.image)["Id"]
            except _docker().errors.ImageNotFound:
                return None
        return daemon.image_toolchain(self.api, image_id)


def held_memory(memory_stats: dict[str, Any]) -> int | None:
    """Bytes held, from an engine's ``memory_stats``: usage less the inactive page cache
    (cgroup v2 ``inactive_file``, v1 ``total_inactive_file``), the figure ``docker stats``
    shows; None without a usage (a runtime that keeps no cgroup statistics)."""
    usage = memory_stats.get("usage")
    if not checks.is_whole(usage, low=0):
        return None
    detail = memory_stats.get("stats") or {}
    cache = detail.get("inactive_file", detail.get("total_inactive_file", 0))
    return max(usage - (cache if checks.is_whole(cache, 0, usage) else 0), 0)


def _transport_errors() -> tuple[type[BaseException], ...]:
    import requests

    return (requests.exceptions.ConnectionError, requests.exceptions.Timeout)


def _classify(exc: Any, default: type[Exception]) -> Exception:
    """Map an engine error to an rtax error class (429 -> rate_limited, else `default`)."""
    status = getattr(exc, "status_code", None)
    message = str(getattr(exc, "explanation", None) or exc)
    if status == 429 or "toomanyrequests" in message.lower():
        return RateLimited(message)
    return default(f"{status}: {message}")
