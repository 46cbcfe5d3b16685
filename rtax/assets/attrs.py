"""The attrs fixture: an offline git repository of a pinned attrs release with one injected bug.

Why: the T1/T2 workloads need a real Python project with a real test suite (the study uses
python-attrs), but probes must not depend on reaching GitHub. So rtax builds, from the PyPI source
distribution of a pinned attrs release (it ships the tests):

- a git repository with two commits: ``pristine`` (the release as published) and ``buggy`` (one
  realistic off-by-one in ``max_len``, which makes two fast tests fail); the fix is kept as a patch;
- a bare clone of it, served over ``git://`` on a local port by `GitServer` or cloned by path;
- an environment template: the pristine checkout (preloaded for T1) and the AST-search tool.

Commits are made with a fixed author and date, so the commit ids are the same on every machine.
Building is idempotent: a manifest records the recipe, and an up-to-date build is a no-op.
See docs/workloads.md#the-attrs-fixture.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rtax.core import paths
from rtax.core.workloads import RepoSource

ATTRS_VERSION = "25.3.0"
ATTRS_SDIST_SHA256 = "75d7cefc7fb576747b2c81b4442d4d4a1ce0900973527c011d1030fd3bf4af1b"


@dataclass(frozen=True)
class Bug:
    """A one-line bug injected into the pristine release, and the tests it breaks."""

    path: str
    before: str
    after: str
    failing_test: str
    summary: str


BUG = Bug(
    path="src/attr/validators.py",
    before="if len(value) > self.max_length:",
    after="if len(value) >= self.max_length:",
    failing_test="tests/test_validators.py::TestMaxLen::test_check_valid",
    summary="max_len rejects values of exactly the maximum length (off by one)",
)

#: Bump when the layout of the built fixture changes, so old builds are rebuilt.
RECIPE_VERSION = 2

_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "rtax fixtures",
    "GIT_AUTHOR_EMAIL": "fixtures@rtax.invalid",
    "GIT_COMMITTER_NAME": "rtax fixtures",
    "GIT_COMMITTER_EMAIL": "fixtures@rtax.invalid",
    "GIT_AUTHOR_DATE": "2025-03-14T12:00:00+00:00",
    "GIT_COMMITTER_DATE": "2025-03-14T12:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


class FixtureError(RuntimeError):
    """The fixture cannot be built or found; the message says why and what to do."""


@dataclass(frozen=True)
class Fixture:
    """A built fixture, as recorded in its manifest."""

    root: Path
    attrs_version: str
    sdist_sha256: str
    pristine_commit: str
    buggy_commit: str
    failing_test: str
    bug_summary: str
    recipe: str

    @property
    def bare_repo(self) -> Path:
        """The bare repository that is cloned (by path, or over git:// by `GitServer`)."""
        return self.root / "attrs.git"

    @property
    def template(self) -> Path:
        """The environment template: ``attrs/`` (pristine checkout) and ``tools/astsearch.py``."""
        return self.root / "template"

    @property
    def fix_patch_path(self) -> Path:
        return self.root / "fix.patch"

    @property
    def fix_patch(self) -> str:
        return self.fix_patch_path.read_text()

    def repo_source(self, url: str) -> RepoSource:
        """T2's source: this fixture's buggy commit, fix and failing test, cloned from `url`."""
        return RepoSource(url, self.buggy_commit, self.fix_patch, self.failing_test)


def _recipe() -> str:
    tool = (Path(__file__).parent / "tools" / "astsearch.py").read_bytes()
    parts = [str(RECIPE_VERSION), ATTRS_VERSION, ATTRS_SDIST_SHA256, json.dumps(asdict(BUG))]
    digest = hashlib.sha256("\n".join(parts).encode() + tool)
    return digest.hexdigest()[:16]


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **_GIT_IDENTITY}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise FixtureError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def load(root: Path | None = None) -> Fixture | None:
    """The fixture built at `root` (default: data/fixtures) if it is complete and current."""
    root = Path(root) if root else paths.fixtures_dir()
    try:
        manifest = json.loads((root / "manifest.json").read_text())
        fixture = Fixture(root=root, **manifest)
    except (OSError, ValueError, TypeError):
        return None
    if fixture.recipe != _recipe():
        return None
    if not (fixture.bare_repo.is_dir() and fixture.template.is_dir()):
        return None
    if not fixture.fix_patch_path.is_file():
        return None
    return fixture


def fetch_sdist(cache: Path) -> Path:
    """The pinned attrs sdist: `$RTAX_ATTRS_SDIST`, the cache, or a `pip download` from PyPI."""
    override = os.environ.get("RTAX_ATTRS_SDIST")
    candidates = [Path(override)] if override else []
    cached = cache / f"attrs-{ATTRS_VERSION}.tar.gz"
    candidates.append(cached)
    for path in candidates:
        if path.is_file() and _sha256(path) == ATTRS_SDIST_SHA256:
            return path
    if override:
        raise FixtureError(f"RTAX_ATTRS_SDIST={override} is not attrs {ATTRS_VERSION}'s sdist")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"attrs=={ATTRS_VERSION}",
            "-d",
            tmp,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        got = Path(tmp) / cached.name
        if proc.returncode != 0 or not got.is_file():
            raise FixtureError(
                f"cannot download attrs {ATTRS_VERSION} sdist from PyPI "
                f"({proc.stderr.strip().splitlines()[-1:] or 'no file'}); "
                "set RTAX_ATTRS_SDIST to a local copy"
            )
        if _sha256(got) != ATTRS_SDIST_SHA256:
            raise FixtureError(f"downloaded {got.name} does not match the pinned sha256")
        got.replace(cached)
    return cached


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(root: Path | None = None, *, force: bool = False) -> Fixture:
    """Build the fixture at `root` (default: data/fixtures); a no-op when it is already current."""
    root = Path(root) if root else paths.fixtures_dir()
    if not force and (existing := load(root)) is not None:
        return existing
    if shutil.which("git") is None:
        raise FixtureError("git is not installed (apt-get install git)")
    sdist = fetch_sdist(root.parent / "cache")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
        staging = Path(tmp) / "fixture"
        staging.mkdir()
        work = _make_repo(sdist, Path(tmp))
        pristine = _git("rev-parse", "HEAD~1", cwd=work).strip()
        buggy = _git("rev-parse", "HEAD", cwd=work).strip()
        fix = _git("diff", "--no-color", buggy, pristine, cwd=work)
        (staging / "fix.patch").write_text(fix)
        _git("clone", "--quiet", "--bare", str(work), str(staging / "attrs.git"), cwd=Path(tmp))
        _make_template(work, pristine, staging / "template")
        manifest = {
            "attrs_version": ATTRS_VERSION,
            "sdist_sha256": ATTRS_SDIST_SHA256,
            "pristine_commit": pristine,
            "buggy_commit": buggy,
            "failing_test": BUG.failing_test,
            "bug_summary": BUG.summary,
            "recipe": _recipe(),
        }
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        # Swap the finished build in; the manifest goes last so a half-built tree never loads.
        for name in ("attrs.git", "template", "fix.patch", "manifest.json"):
            target = root / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        for name in ("attrs.git", "template", "fix.patch", "manifest.json"):
            (staging / name).replace(root / name)
    fixture = load(root)
    if fixture is None:
        raise FixtureError(f"fixture at {root} did not load after building")
    return fixture


def _make_repo(sdist: Path, tmp: Path) -> Path:
    """Unpack the sdist into a repo: commit the release, then commit the bug."""
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 (Debian 12 ships 3.11.2)
            tar.extractall(tmp / "unpacked", filter="data")
        else:
            for member in tar.getmembers():
                target = (tmp / "unpacked" / member.name).resolve()
                if not target.is_relative_to((tmp / "unpacked").resolve()) or not (
                    member.isfile() or member.isdir()
                ):
                    raise FixtureError(f"unsafe member in the sdist: {member.name}")
            tar.extractall(tmp / "unpacked")
    work = tmp / "unpacked" / f"attrs-{ATTRS_VERSION}"
    _git("init", "--quiet", "--initial-branch=main", cwd=work)
    _git("add", "--all", cwd=work)
    _git(
        "commit",
        "--quiet",
        "--no-gpg-sign",
        "-m",
        f"attrs {ATTRS_VERSION}, as released on PyPI",
        cwd=work,
    )
    _git("tag", "pristine", cwd=work)
    target = work / BUG.path
    source = target.read_text()
    if source.count(BUG.before) != 1:
        raise FixtureError(f"bug site not found exactly once in {BUG.path}")
    target.write_text(source.replace(BUG.before, BUG.after))
    _git("commit", "--quiet", "--no-gpg-sign", "-am", f"validators: {BUG.summary}", cwd=work)
    _git("tag", "buggy", cwd=work)
    return work


def _make_template(work: Path, pristine: str, template: Path) -> None:
    """The preloaded environment: attrs/ at the pristine commit, and tools/astsearch.py."""
    _git("checkout", "--quiet", pristine, cwd=work)
    shutil.copytree(work, template / "attrs", ignore=shutil.ignore_patterns(".git"))
    (template / "tools").mkdir()
    shutil.copy2(Path(__file__).parent / "tools" / "astsearch.py", template / "tools")


class GitServer:
    """Serve the fixture over ``git://`` with ``git daemon`` on a local port, for T2 clones.

    Why a network protocol: cloning over the wire is what a real rollout does, and it is the path a
    container (which can't see the host's files) will take. Use as a context manager::

        with GitServer(fixture.root) as server:
            url = server.url("attrs.git")
    """

    def __init__(
        self, base: Path, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 10.0
    ) -> None:
        self.base = Path(base)
        self.host = host
        self.port = port or _free_port(host)
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, repo: str = "attrs.git") -> str:
        return f"git://{self.host}:{self.port}/{repo}"

    def start(self) -> GitServer:
        # git-daemon itself, not the `git daemon` wrapper, so that the parent-death signal
        # reaches the process that listens.
        cmd = [
            _git_daemon(),
            "--reuseaddr",
            "--export-all",
            "--informative-errors",
            f"--base-path={self.base}",
            f"--listen={self.host}",
            f"--port={self.port}",
            str(self.base),
        ]
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent
        )
        if not _wait_for_port(self.host, self.port, self.start_timeout_s, self._proc):
            err = b""
            if self._proc.poll() is not None and self._proc.stderr:
                err = self._proc.stderr.read()
            self.stop()
            raise FixtureError(
                f"git daemon did not listen on {self.host}:{self.port}: "
                f"{err.decode(errors='replace').strip() or 'timed out'}"
            )
        return self

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stderr:
                self._proc.stderr.close()
            self._proc = None

    def __enter__(self) -> GitServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _git_daemon() -> str:
    exec_path = subprocess.run(
        ["git", "--exec-path"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return str(Path(exec_path) / "git-daemon")


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies (Linux PR_SET_PDEATHSIG), so that a
    probe killed with SIGKILL leaves no git daemon behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the daemon is still stopped on every normal and interrupted exit


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _wait_for_port(host: str, port: int, timeout_s: float, proc: subprocess.Popen[bytes]) -> bool:
    """Poll until the port accepts a connection, the process dies, or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(delay)  # polling with a deadline, not a sleep used as synchronisation
            delay = min(delay * 2, 0.1)
    return False
