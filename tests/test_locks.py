"""The two locks agree with pyproject.toml and with each other (docs/container.md#dependencies).

Why: the app image installs requirements.txt only and `make` installs requirements-dev.txt, so
a package pinned differently in the two would make the image run other code than the tests
tested, and a dev-only package in the runtime lock would put the test tools back in the image.
Both are static checks of the committed files (no network); whether the locks are current for
pyproject.toml is `make lock`'s to say.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from polling import DEADLINE_S

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def _norm(name: str) -> str:
    """PEP 503: `Daytona_API.client` and `daytona-api-client` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(lock: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / lock).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            match = PIN.match(line)
            assert match, f"{lock}: not an exact pin: {line!r}"
            pins[_norm(match[1])] = match[2]
    return pins


def _names(requirements: list[str]) -> set[str]:
    """The distributions that requirement strings name (`rtax[emulate]` is this project)."""
    return {_norm(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements} - {"rtax"}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_shared_packages_have_one_version() -> None:
    runtime, dev = _pins("requirements.txt"), _pins("requirements-dev.txt")
    assert not set(runtime) - set(dev), "the dev lock must hold the whole runtime lock"
    assert {n: v for n, v in runtime.items() if dev[n] != v} == {}


def test_each_lock_holds_its_declared_dependencies() -> None:
    project = _project()
    extras = project["optional-dependencies"]
    assert not _names(project["dependencies"]) - set(_pins("requirements.txt"))
    declared = _names(project["dependencies"] + extras["emulate"] + extras["ray"] + extras["dev"])
    assert not declared - set(_pins("requirements-dev.txt"))


def test_no_dev_only_package_reaches_the_runtime_lock() -> None:
    extras = _project()["optional-dependencies"]
    # moto brings the emulation's heaviest packages; the rest are the tools of `make test`
    dev_only = _names(extras["dev"]) | {"moto", "cfn-lint", "sympy", "networkx", "flask"}
    assert dev_only & set(_pins("requirements.txt")) == set()


def test_runtime_modules_import_without_dev_packages() -> None:
    """Every rtax module but the emulations imports with the dev-only distributions' modules
    made unimportable, as in the app image: a runtime module importing one at its top level
    would fail there, not here."""
    dev_only = set(_pins("requirements-dev.txt")) - set(_pins("requirements.txt"))
    script = f"""
import importlib, importlib.abc, importlib.metadata, pkgutil, sys
dev_only = {sorted(dev_only)!r}
norm = lambda n: n.replace("_", "-").replace(".", "-").lower()
blocked = {{m for m, d in importlib.metadata.packages_distributions().items()
           if all(norm(x) in dev_only for x in d)}}
assert {{"moto", "pytest", "hypothesis", "playwright"}} <= blocked, blocked

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"dev-only module {{name}} imported")
        return None

for name in [m for m in sys.modules if m.partition(".")[0] in blocked]:
    del sys.modules[name]
sys.meta_path.insert(0, Block())
import rtax
for info in pkgutil.walk_packages(rtax.__path__, "rtax."):
    if not info.name.startswith(("rtax.emulation", "rtax.__main__")):
        importlib.import_module(info.name)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
