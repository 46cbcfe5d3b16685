"""The runner image for Docker-backed environments, built without any container registry.

Why: no registry is reachable on the machines rtax is developed and tested on, and a measurement
tool must not depend on one anyway. So (docs/substrates/docker.md#the-runner-image):

1. the base is a Debian bookworm root filesystem made by ``mmdebstrap --variant=minbase`` with
   python3, git, ca-certificates and procps, imported with ``docker import``;
2. ``rtax/assets/images/runner.Dockerfile`` adds the workload toolchain (docs/toolchain.md), the
   preloaded attrs checkout and the AST-search tool (the fixture's template). ``--base`` swaps in
   an official Python image where a registry exists.

The runner image carries a ``rtax.recipe`` label (Dockerfile, fixture, base, toolchain pins and
install script); a current image is not rebuilt. Its id goes into every Docker run's provenance.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from rtax.assets import attrs, toolchain
from rtax.assets.attrs import Fixture

BASE_IMAGE = "rtax-base:bookworm"
RUNNER_IMAGE = "rtax-runner:latest"
#: The base holds the interpreter and the tools the workloads call; pytest and hypothesis come
#: from the workload toolchain, never from Debian (docs/toolchain.md).
BASE_PACKAGES = (
    "python3",
    "git",
    "ca-certificates",
    "procps",
)
#: Names the base's contents; a base built from another package list is rebuilt.
BASE_RECIPE = hashlib.sha256(" ".join(BASE_PACKAGES).encode()).hexdigest()[:16]
DOCKERFILE = Path(__file__).parent / "images" / "runner.Dockerfile"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class ImageError(RuntimeError):
    """The image can't be built; the message says which step failed and why."""


def _client() -> Any:
    import docker

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # docker raises several unrelated types for "no engine"
        raise ImageError(f"no Docker engine answers ({exc}); start dockerd first") from exc
    return client


def recipe(fixture: Fixture, base: str) -> str:
    """What the runner image is made of: Dockerfile, fixture, base, toolchain pins and script."""
    digest = hashlib.sha256()
    digest.update(DOCKERFILE.read_bytes())
    digest.update(fixture.recipe.encode())
    digest.update(base.encode())
    if base == BASE_IMAGE:
        digest.update(BASE_RECIPE.encode())
    digest.update(toolchain.PIN_FILE.read_bytes())
    digest.update(toolchain.INSTALL_SCRIPT.read_bytes())
    return digest.hexdigest()[:16]


def _image_labels(client: Any, ref: str) -> dict[str, str] | None:
    import docker.errors

    try:
        return client.images.get(ref).labels or {}
    except docker.errors.ImageNotFound:
        return None


def build_base(client: Any, *, mirror: str | None = None) -> str:
    """Make the Debian base with mmdebstrap | docker import; return its image id.

    The import goes to a temporary tag and is retagged only when mmdebstrap succeeded, so a
    failed build never leaves a broken base behind under the real name."""
    if shutil.which("mmdebstrap") is None:
        raise ImageError("mmdebstrap is not installed (apt-get install mmdebstrap)")
    mirror = mirror or os.environ.get("RTAX_DEBIAN_MIRROR", DEFAULT_MIRROR)
    staging = f"{BASE_IMAGE}-partial"
    with tempfile.TemporaryFile() as errors:  # a file, so a chatty mmdebstrap never blocks
        debootstrap = subprocess.Popen(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                "bookworm",
                "-",
                f"deb {mirror} bookworm main",
            ],
            stdout=subprocess.PIPE,
            stderr=errors,
        )
        assert debootstrap.stdout is not None
        importer = subprocess.run(
            [
                "docker",
                "import",
                "--change",
                'CMD ["/bin/sh"]',
                "--change",
                "ENV LANG=C.UTF-8",
                "--change",
                f"LABEL rtax.base-recipe={BASE_RECIPE}",
                "-",
                staging,
            ],
            stdin=debootstrap.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        debootstrap.stdout.close()
        status = debootstrap.wait()
        errors.seek(0)
        err = errors.read().decode(errors="replace")
    if status != 0 or importer.returncode != 0:
        with contextlib.suppress(Exception):
            client.images.remove(staging, force=True)
        if status != 0:
            raise ImageError(f"mmdebstrap failed: {err.strip()[-500:]}")
        raise ImageError(f"docker import failed: {importer.stderr.strip()}")
    image = client.images.get(staging)
    repository, _, tag = BASE_IMAGE.partition(":")
    image.tag(repository, tag)
    client.images.remove(staging)
    return client.images.get(BASE_IMAGE).id


def ensure_runner(*, base: str = BASE_IMAGE, force: bool = False, log: Any = print) -> str:
    """Build (if missing or stale) and return the id of the runner image `RUNNER_IMAGE`."""
    fixture = attrs.build()
    client = _client()
    want = recipe(fixture, base)
    labels = _image_labels(client, RUNNER_IMAGE)
    if not force and labels is not None and labels.get("rtax.recipe") == want:
        return client.images.get(RUNNER_IMAGE).id
    toolchain.download(log)
    base_labels = _image_labels(client, BASE_IMAGE) if base == BASE_IMAGE else {}
    if base == BASE_IMAGE and (
        force or base_labels is None or base_labels.get("rtax.base-recipe") != BASE_RECIPE
    ):
        log(f"building {BASE_IMAGE} with mmdebstrap (a minute or two, once)...")
        build_base(client)
    log(f"building {RUNNER_IMAGE} from {base}...")
    with tempfile.TemporaryDirectory(prefix="rtax-image-") as tmp:
        context = Path(tmp)
        shutil.copy(DOCKERFILE, context / "Dockerfile")
        shutil.copytree(fixture.template, context / "template", symlinks=True)
        toolchain.stage(context)
        import docker.errors

        try:
            image, _ = client.images.build(
                path=str(context),
                tag=RUNNER_IMAGE,
                buildargs={"BASE": base},
                rm=True,
                forcerm=True,
                labels={"rtax.recipe": want, "rtax": "runner-image"},
            )
        except (docker.errors.BuildError, docker.errors.APIError) as exc:
            raise ImageError(f"docker build of {RUNNER_IMAGE} failed: {exc}") from exc
    return image.id
