"""The workload toolchain: one pinned set of programs, installed the same way on every substrate.

Why (docs/toolchain.md, DESIGN "Comparability"): a substrate's tax is what it adds
around *the same* commands. The first round timed the project venv's pytest (with its plugins) on
`local` and Debian's older pytest in the runner image, so the floor looked slower than a
container. Now:

- `rtax/assets/toolchain.txt` pins the interpreter's minor version and every distribution the
  workloads import, each with its wheel's sha256;
- the wheels are downloaded once into the data cache (`download`), verified, and installed by one
  script (`rtax/assets/images/install-toolchain.sh`) into the runner image's ``/opt/toolchain`` and
  into the local floor's venv (`ensure_local`), which is made from the system's interpreter of the
  pinned minor version, never from the project's venv;
- every run records the toolchain it ran with (`fingerprint`: interpreter and installed
  distributions, as seen by the ``python3`` the workloads call); `digest` condenses the part that
  decides comparability (implementation, minor version, distributions) so the dashboard can mark a
  series whose toolchain differs from the floor's.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtax.core import paths

PIN_FILE = Path(__file__).with_name("toolchain.txt")
INSTALL_SCRIPT = Path(__file__).parent / "images" / "install-toolchain.sh"
#: The tool that unpacks the wheels; run from its own wheel, never part of the toolchain.
INSTALLER = "installer"
#: Where the runner image keeps the toolchain (first on its PATH).
IMAGE_PREFIX = "/opt/toolchain"

#: Printed by the interpreter the workloads call: what a fingerprint is made of. Run with -I so
#: that neither PYTHONPATH nor a user site can add to it.
FINGERPRINT_SCRIPT = (
    "import importlib.metadata as m, json, platform, sys; "
    "print(json.dumps({'implementation': sys.implementation.name, "
    "'python': platform.python_version(), 'executable': sys.executable, "
    "'distributions': dict(sorted((d.metadata['Name'].lower().replace('_', '-'), d.version) "
    "for d in m.distributions()))}))"
)


class ToolchainError(RuntimeError):
    """The toolchain can't be downloaded, verified or installed; the message says what to do."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]


@dataclass(frozen=True)
class Pins:
    """The parsed pin file."""

    python: str  # "3.11"
    pins: tuple[Pin, ...]
    text: str

    @property
    def recipe(self) -> str:
        """Changes whenever the pin file does; names the local toolchain's folder."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]

    @property
    def workload(self) -> tuple[Pin, ...]:
        """The distributions the workloads use (the installer is only a tool)."""
        return tuple(p for p in self.pins if p.name != INSTALLER)

    def expected(self) -> dict[str, str]:
        """name -> version of what a correct toolchain holds, as `fingerprint` reports it."""
        return {p.name: p.version for p in self.workload}


_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+!-]+)$")


def load(path: Path = PIN_FILE) -> Pins:
    """Parse the pin file: ``# python X.Y`` and ``name==version --hash=sha256:...`` lines."""
    text = path.read_text()
    python = None
    pins: list[Pin] = []
    for logical in text.replace("\\\n", " ").splitlines():
        line = logical.strip()
        if not line:
            continue
        if line.startswith("#"):
            found = re.fullmatch(r"#\s*python\s+(\d+\.\d+)", line)
            if found:
                python = found.group(1)
            continue
        spec, *options = line.split()
        match = _PIN.match(spec)
        if not match or not options:
            raise ToolchainError(f"{path}: not a pinned, hashed requirement: {line!r}")
        hashes = tuple(
            opt.removeprefix("--hash=sha256:") for opt in options if opt.startswith("--hash=")
        )
        pins.append(Pin(_normalise(match.group(1)), match.group(2), hashes))
    if python is None:
        raise ToolchainError(f"{path}: no '# python X.Y' line")
    if not any(p.name == INSTALLER for p in pins):
        raise ToolchainError(f"{path}: the {INSTALLER} wheel is not pinned")
    return Pins(python, tuple(pins), text)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheels_dir() -> Path:
    """Where the pinned wheels are kept (downloaded once; git-ignored)."""
    return paths.data_dir() / "cache" / "wheels"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wheel_of(pin: Pin, files: list[Path]) -> Path | None:
    prefix = f"{pin.name.replace('-', '_')}-{pin.version}-"
    for path in files:
        if path.name.lower().startswith(prefix) and _sha256(path) in pin.hashes:
            return path
    return None


def wheels(pins: Pins | None = None, folder: Path | None = None) -> dict[str, Path]:
    """name -> verified wheel file for every pin; raises if one is missing or altered."""
    pins = pins or load()
    folder = folder or wheels_dir()
    files = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    found, missing = {}, []
    for pin in pins.pins:
        wheel = _wheel_of(pin, files)
        if wheel is None:
            missing.append(f"{pin.name}=={pin.version}")
        else:
            found[pin.name] = wheel
    if missing:
        raise ToolchainError(
            f"no verified wheel in {folder} for {', '.join(missing)} (run: rtax toolchain)"
        )
    return found


def download(log: Callable[[str], None] = print, pins: Pins | None = None) -> dict[str, Path]:
    """Make sure every pinned wheel is in the cache, verified by its hash; download what is
    missing from PyPI with pip (for this machine's platform and the pinned Python)."""
    pins = pins or load()
    folder = wheels_dir()
    with contextlib.suppress(ToolchainError):
        return wheels(pins, folder)
    folder.mkdir(parents=True, exist_ok=True)
    log(f"downloading the workload toolchain's wheels into {folder}...")
    with _locked(folder / ".lock"):
        requirements = folder / "requirements.txt"
        requirements.write_text(pins.text)
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "--python-version",
            pins.python,
            "--implementation",
            "cp",
            "-d",
            str(folder),
            "-r",
            str(requirements),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ToolchainError(f"pip download of the toolchain failed: {' '.join(tail)}")
    return wheels(pins, folder)


def stage(context: Path, pins: Pins | None = None) -> None:
    """Put the verified wheels, the installer and the install script into a Docker build
    context (``toolchain/``), for the runner image's Dockerfile."""
    pins = pins or load()
    found = wheels(pins)
    target = context / "toolchain"
    (target / "wheels").mkdir(parents=True)
    for name, path in found.items():
        dest = target / ("installer.whl" if name == INSTALLER else f"wheels/{path.name}")
        shutil.copy(path, dest)
    shutil.copy(INSTALL_SCRIPT, target / "install-toolchain.sh")


def find_interpreter(minor: str) -> str:
    """The system's interpreter of the pinned minor version (never the project venv's).

    `RTAX_TOOLCHAIN_PYTHON` chooses one; else ``/usr/bin/pythonX.Y`` (the distribution's build,
    the one the Debian runner image has too), else ``pythonX.Y`` on PATH, else the interpreter
    this venv was made from when its version matches."""
    override = os.environ.get("RTAX_TOOLCHAIN_PYTHON")
    candidates = [override] if override else []
    candidates += [f"/usr/bin/python{minor}", shutil.which(f"python{minor}")]
    base = getattr(sys, "_base_executable", None)
    if base and f"{sys.version_info[0]}.{sys.version_info[1]}" == minor:
        candidates.append(base)
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and _minor_of(candidate) == minor:
            return candidate
    if override:
        raise ToolchainError(f"RTAX_TOOLCHAIN_PYTHON={override} is not a Python {minor}")
    raise ToolchainError(
        f"no Python {minor} interpreter found for the workload toolchain "
        f"(install python{minor}, or set RTAX_TOOLCHAIN_PYTHON)"
    )


def _minor_of(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def local_dir(pins: Pins | None = None) -> Path:
    """The local floor's toolchain venv (one per pin-file recipe)."""
    pins = pins or load()
    return paths.toolchain_dir() / f"{pins.recipe}-py{pins.python}"


def ensure_local(log: Callable[[str], None] = print, pins: Pins | None = None) -> Path:
    """Build the local floor's toolchain when missing; return its ``bin`` folder.

    Built in place under a lock, with a stamp written last: an interrupted build is found
    without its stamp and made again (a venv can't be moved after it is made)."""
    pins = pins or load()
    target = local_dir(pins)
    stamp = target / "rtax-toolchain.json"
    if stamp.is_file():
        return target / "bin"
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / f".{target.name}.lock"):
        if stamp.is_file():
            return target / "bin"
        found = download(log, pins)
        python = find_interpreter(pins.python)
        log(f"installing the workload toolchain for local into {target} (Python {python})...")
        shutil.rmtree(target, ignore_errors=True)
        staging = target.parent / f".{target.name}.wheels"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            for name, path in found.items():
                if name != INSTALLER:
                    shutil.copy(path, staging / path.name)
            done = subprocess.run(
                [
                    "sh",
                    str(INSTALL_SCRIPT),
                    python,
                    str(target),
                    str(staging),
                    str(found[INSTALLER]),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if done.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            raise ToolchainError(f"installing the toolchain failed: {done.stderr.strip()[-500:]}")
        found_fp = fingerprint(str(target / "bin" / "python3"))
        problems = mismatches(found_fp, pins)
        if problems:
            shutil.rmtree(target, ignore_errors=True)
            raise ToolchainError(f"the installed toolchain is not the pinned one: {problems}")
        stamp.write_text(json.dumps({"recipe": pins.recipe, "interpreter": python}))
    return target / "bin"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fingerprint(python: str = "python3", env: dict[str, str] | None = None) -> dict[str, Any]:
    """Interpreter and installed distributions as `python` (resolved on `env`'s PATH) sees them."""
    try:
        done = subprocess.run(
            [python, "-I", "-c", FINGERPRINT_SCRIPT],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {python}: {exc}") from exc
    if done.returncode != 0:
        raise ToolchainError(f"{python} failed to report its toolchain: {done.stderr.strip()}")
    return parse_fingerprint(done.stdout)


def parse_fingerprint(text: str) -> dict[str, Any]:
    """The JSON line `FINGERPRINT_SCRIPT` prints, with its `digest` added."""
    data = json.loads(text.strip().splitlines()[-1])
    data["digest"] = digest(data)
    return data


def digest(fp: dict[str, Any]) -> str:
    """What decides comparability, condensed: implementation, minor version, distributions.

    The patch version and the executable's path are kept in provenance but left out here: the
    pin is on the minor version, and the floor's venv lives at a different path than the
    image's."""
    minor = ".".join(str(fp.get("python", "")).split(".")[:2])
    key = {
        "implementation": fp.get("implementation"),
        "python": minor,
        "distributions": dict(sorted((fp.get("distributions") or {}).items())),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def mismatches(fp: dict[str, Any], pins: Pins | None = None) -> list[str]:
    """How a reported toolchain differs from the pins (empty when it is exactly the pinned one)."""
    pins = pins or load()
    problems = []
    minor = ".".join(str(fp.get("python", "")).split(".")[:2])
    if minor != pins.python:
        problems.append(f"python {fp.get('python')} (pinned {pins.python})")
    have = fp.get("distributions") or {}
    want = pins.expected()
    for name in sorted(set(have) | set(want)):
        if have.get(name) != want.get(name):
            problems.append(f"{name} {have.get(name, 'absent')} (pinned {want.get(name, 'none')})")
    return problems
