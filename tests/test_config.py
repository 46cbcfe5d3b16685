"""The configuration file: the shipped default is valid, and every kind of mistake is one line
naming its key, with exit code 2 from `rtax config check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtax import cli
from rtax.core import checks
from rtax.core.paths import checkout_root
from rtax.settings import MetricsSettings, config
from rtax.substrates.pool import PoolSettings

GOOD = """
database = "x.db"
[[substrates]]
name = "local"
kind = "local"
[[plans]]
name = "p"
substrates = ["local"]
tier = "T0"
interval = "10m"
"""


def test_shipped_default_is_valid() -> None:
    conf = config.load(checkout_root() / "rtax.toml")
    assert set(conf.substrates) == {"local", "docker", "docker-gvisor"}
    assert conf.substrates["docker"].optional and not conf.substrates["local"].optional
    assert conf.substrates["docker-gvisor"].params == {
        "runtime": "runsc",
        "snapshot_runtime": "runsc-checkpoint",
    }
    assert {(p.tier, p.steps) for p in conf.plans} >= {
        ("T0", 0),
        ("T1", 0),
        ("T2", 0),
        ("T2", 10),
        ("T2", 50),
        ("T2", 150),
    }
    assert conf.concurrency == 1


def test_good_file_and_relative_database(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(GOOD)
    conf = config.load(file)
    assert conf.database == tmp_path / "x.db"
    assert conf.plans[0].interval_s == 600
    # /metrics is on by default, on loopback only (docs/metrics.md)
    assert conf.metrics == MetricsSettings(enabled=True, address="127.0.0.1", port=9470)


def test_metrics_table(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(GOOD + "[metrics]\nenabled = false\naddress = '0.0.0.0'\nport = 0\n")
    assert config.load(file).metrics == MetricsSettings(False, "0.0.0.0", 0)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("database = 3\n", "database"),
        ("colour = 'blue'\n", "colour"),
        ("[[substrates]]\nkind = 'local'\n", "substrates[0].name"),
        ("[[substrates]]\nname = 'x'\nkind = 'vmware'\n", "substrates.x.kind"),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\n[[substrates]]\nname = 'l'\n"
            "kind = 'local'\n",
            "substrates.l",
        ),
        (
            "[[substrates]]\nname = 'e'\nkind = 'local'\nparams = { api_key = 'abc123' }\n",
            "substrates.e.params.api_key",
        ),
        (
            "[[substrates]]\nname = 'e'\nkind = 'local'\nparams = { token_env = 'not a var' }\n",
            "substrates.e.params.token_env",
        ),
        ("[[plans]]\nname = 'p'\nsubstrates = ['nope']\ntier = 'T0'\n", "plans.p.substrates"),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\n[[plans]]\nname = 'p'\n"
            "substrates = ['l']\ntier = 'T7'\n",
            "plans.p.tier",
        ),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\n[[plans]]\nname = 'p'\n"
            "substrates = ['l']\ntier = 'T0'\nsteps = 10\n",
            "plans.p.steps",
        ),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\n[[plans]]\nname = 'p'\n"
            "substrates = ['l']\ntier = 'T0'\nrepeat = 0\n",
            "plans.p.repeat",
        ),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\n[[plans]]\nname = 'p'\n"
            "substrates = ['l']\ntier = 'T0'\ninterval = 'often'\n",
            "plans.p.interval",
        ),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\n[[plans]]\nname = 'p'\n"
            "substrates = ['l']\ntier = 'T0'\ninterval = '1m'\njitter = '2m'\n",
            "plans.p.jitter",
        ),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\n[[plans]]\nname = 'p'\n"
            "substrates = ['l']\ntier = 'T0'\nmode = 'turbo'\n",
            "plans.p.mode",
        ),
        ("[retention]\nraw_days = -1\n", "retention.raw_days"),
        ("[retention]\nbucket = 'week'\n", "retention.bucket"),
        ("[scheduler]\nconcurrency = 0\n", "scheduler.concurrency"),
        ("[scheduler]\ndeadline = 'never'\n", "scheduler.deadline"),
        ("database = [\n", "not valid TOML"),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\nparams = { runtime = 'runsc' }\n",
            "substrates.l.params.runtime",
        ),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\n[[plans]]\nname = 'p'\n"
            "substrates = ['l']\ntier = 'T0'\nmode = 'session'\n",
            "plans.p.mode",
        ),
        (
            "[[substrates]]\nname = 'l'\nkind = 'local'\n[[plans]]\nname = 'p'\n"
            "substrates = ['l']\ntier = 'T0'\ninterval = nan\n",
            "plans.p.interval",
        ),
        ("[scheduler]\nmisfire_grace = '500ms'\n", "scheduler.misfire_grace"),
        ("[retention]\nraw_days = inf\n", "retention.raw_days"),
        ("[[substrates]]\nname = 'l'\nkind = ['local']\n", "substrates.l.kind"),
        ("[[plans]]\nname = ['p']\ntier = 'T0'\n", "plans[0].name"),
        ("metrics = 9470\n", "metrics"),
        ("[metrics]\nport = 70000\n", "metrics.port"),
        ("[metrics]\nport = '9470'\n", "metrics.port"),
        ("[metrics]\nenabled = 'yes'\n", "metrics.enabled"),
        ("[metrics]\naddress = ''\n", "metrics.address"),
        ("[metrics]\npath = '/m'\n", "metrics.path"),
        *(
            (f"[[substrates]]\nname = 'd'\nkind = 'local'\npool = {pool}\n", f"substrates.d.{key}")
            for pool, key in (
                ("4", "pool"),
                ("{}", "pool.size"),
                ("{ size = 0 }", "pool.size"),
                ("{ size = 2.5 }", "pool.size"),
                ("{ size = 2, refill_concurrency = 3 }", "pool.refill_concurrency"),
                ("{ size = 2, refill_concurrency = 0 }", "pool.refill_concurrency"),
                ("{ size = 2, max_idle = 'soon' }", "pool.max_idle"),
                ("{ size = 2, max_idle = '500ms' }", "pool.max_idle"),
                ("{ size = 2, warm = true }", "pool.warm"),
            )
        ),
    ],
)
def test_each_mistake_is_one_line_naming_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str
) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(text)
    with pytest.raises(config.ConfigError) as info:
        config.load(file)
    assert any(key in problem for problem in info.value.problems), info.value.problems
    assert cli.main(["config", "check", "--config", str(file)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert all(line.startswith("rtax config: error: ") for line in lines)
    assert any(key in line for line in lines)
    assert "Traceback" not in err


def test_a_pool_is_read_with_its_defaults(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(
        GOOD + "[[substrates]]\nname = 'warm'\nkind = 'local'\npool = { size = 4 }\n"
        "[[substrates]]\nname = 'warmer'\nkind = 'local'\n"
        "pool = { size = 8, refill_concurrency = 3, max_idle = '2m' }\n"
    )
    conf = config.load(file).substrates
    assert conf["local"].pool is None
    assert conf["warm"].pool == PoolSettings(size=4, refill_concurrency=1, max_idle_s=600.0)
    assert conf["warmer"].pool == PoolSettings(size=8, refill_concurrency=3, max_idle_s=120.0)


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["config", "check", "--config", str(tmp_path / "none.toml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_durations() -> None:
    assert [checks.duration(v) for v in (5, "90s", "10m", "1.5h", "2d", "250ms")] == [
        5.0,
        90.0,
        600.0,
        5400.0,
        172800.0,
        0.25,
    ]
    with pytest.raises(ValueError):
        checks.duration("soon")


def test_env_var_parameters_are_names_not_values(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(
        GOOD.replace('kind = "local"', 'kind = "local"\nparams = { root_env = "RTAX_TEST_ROOT" }')
    )
    conf = config.load(file)
    assert conf.substrates["local"].params == {"root_env": "RTAX_TEST_ROOT"}


def test_every_toml_example_in_the_docs_is_a_valid_configuration(tmp_path: Path) -> None:
    """The documentation's configuration examples (README.md and docs/, real clusters and
    accounts included) pass the same checks as `rtax config check`: docs that match the
    behaviour."""
    import re
    import tomllib

    root = Path(__file__).resolve().parent.parent
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    blocks = {
        f"{page.relative_to(root)} #{i}": block
        for page in pages
        for i, block in enumerate(re.findall(r"```toml\n(.*?)```", page.read_text(), flags=re.S))
    }
    assert len(blocks) >= 5, blocks  # configuration, budgets, kubernetes, ec2, daytona
    kinds = set()
    for where, block in blocks.items():
        try:
            conf = config.parse(tomllib.loads(block), base=tmp_path)
        except (config.ConfigError, tomllib.TOMLDecodeError) as exc:
            raise AssertionError(f"{where}: {exc}") from None
        kinds |= {s.kind for s in conf.substrates.values()}
    assert {"kubernetes", "ec2", "daytona"} <= kinds
