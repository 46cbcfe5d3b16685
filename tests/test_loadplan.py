"""Load plans and capacity bounds (rtax.settings.loads): the configuration's ``[[loads]]`` and
``[capacity]`` tables, each mistake one line naming its key; the shapes' launch offsets; the
plan `rtax burst` builds from a name and its flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtax import cli
from rtax.core.paths import checkout_root
from rtax.rollouts import burst
from rtax.settings import config
from rtax.settings.loads import Bounds, LoadError, LoadPlan

BASE = """
[[substrates]]
name = "local"
kind = "local"
"""


def _conf(tmp_path: Path, text: str) -> config.Config:
    file = tmp_path / "c.toml"
    file.write_text(text + "\n" + BASE)  # top-level keys first, then the tables
    return config.load(file)


def _problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(config.ConfigError) as info:
        _conf(tmp_path, text)
    return info.value.problems


def test_the_shipped_loads_and_bounds() -> None:
    conf = config.load(checkout_root() / "rtax.toml")
    by_name = {p.name: p for p in conf.loads}
    assert by_name["docker-burst-20"] == LoadPlan(
        "docker", "T0", "burst", 20, name="docker-burst-20"
    )
    staggered = by_name["docker-staggered-20"]
    assert staggered.shape == "staggered" and staggered.every_s == 0.25
    assert conf.capacity == Bounds(None, 2.0, 0.05)


def test_a_load_table_with_every_key(tmp_path: Path) -> None:
    conf = _conf(
        tmp_path,
        """
[[loads]]
name = "ramp"
substrate = "docker"          # built in: no [[substrates]] entry needed
tier = "T2"
steps = 10
shape = "staggered"
n = 40
every = "125ms"
mode = "session"
[capacity]
ttfc_p95_max = "3s"
ttfc_p95_ratio_max = 1.5
failure_rate_max = 0.01
""",
    )
    assert conf.loads == (LoadPlan("docker", "T2", "staggered", 40, 0.125, 10, "session", "ramp"),)
    assert conf.capacity == Bounds(3.0, 1.5, 0.01)
    assert conf.loads[0].offsets() == [i * 0.125 for i in range(40)]
    assert conf.loads[0].concurrency == 40


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[[loads]]\nsubstrate = 'local'", "loads[0].name: missing"),
        ("[[loads]]\nname = 'x'\nsubstrate = 'nope'", "loads.x.substrate: unknown substrate"),
        ("[[loads]]\nname = 'x'\nsubstrate = 'local'\nshape = 'ramp'", "loads.x.shape: must be"),
        ("[[loads]]\nname = 'x'\nsubstrate = 'local'\nn = 0", "loads.x.n: must be a whole"),
        ("[[loads]]\nname = 'x'\nsubstrate = 'local'\nn = 1001", "loads.x.n: must be a whole"),
        ("[[loads]]\nname = 'x'\nsubstrate = 'local'\nn = 2.5", "loads.x.n: must be a whole"),
        (
            "[[loads]]\nname = 'x'\nsubstrate = 'local'\nshape = 'staggered'",
            "loads.x.every: a staggered load needs the launch interval",
        ),
        (
            "[[loads]]\nname = 'x'\nsubstrate = 'local'\nevery = '1s'",
            "loads.x.every: only a staggered load has a launch interval, not a burst",
        ),
        (
            "[[loads]]\nname = 'x'\nsubstrate = 'local'\nshape = 'staggered'\nevery = 'soon'",
            "loads.x.every: not a duration",
        ),
        (
            "[[loads]]\nname = 'x'\nsubstrate = 'local'\nshape = 'staggered'\nevery = 0",
            "loads.x.every: must be a duration > 0",
        ),
        ("[[loads]]\nname = 'x'\nsubstrate = 'local'\ntier = 'T9'", "loads.x.tier: unknown tier"),
        ("[[loads]]\nname = 'x'\nsubstrate = 'local'\nsteps = 10", "loads.x.steps: trajectories"),
        ("[[loads]]\nname = 'x'\nsubstrate = 'local'\nsteps = 'ten'", "loads.x.steps: must be"),
        (
            "[[loads]]\nname = 'x'\nsubstrate = 'local'\nmode = 'session'",
            "loads.x.mode: substrate 'local' has no action modes",
        ),
        ("[[loads]]\nname = 'x'\nsubstrate = 'local'\nrepeat = 3", "loads.x.repeat: unknown key"),
        ("[[loads]]\nname = 'x'\nsubstrate = 'local'\n" * 2, "loads.x: defined twice"),
        ("loads = 3", "loads: must be an array of tables"),
        ("[capacity]\nttfc_p95_max = 'fast'", "capacity.ttfc_p95_max: not a duration"),
        ("[capacity]\nttfc_p95_max = 0", "capacity.ttfc_p95_max: must be a duration > 0"),
        ("[capacity]\nttfc_p95_ratio_max = 0.5", "capacity.ttfc_p95_ratio_max: must be"),
        ("[capacity]\nfailure_rate_max = 1", "capacity.failure_rate_max: must be a fraction"),
        ("[capacity]\nfailure_rate_max = true", "capacity.failure_rate_max: must be a fraction"),
        ("[capacity]\np99 = 1", "capacity.p99: unknown key"),
        ("capacity = 1", "capacity: must be a table"),
    ],
)
def test_each_mistake_is_one_line_naming_its_key(tmp_path: Path, text: str, expected: str) -> None:
    problems = _problems(tmp_path, text)
    assert len(problems) == 1, problems
    assert expected in problems[0]


def test_config_check_names_a_bad_load(tmp_path: Path, capsys) -> None:
    file = tmp_path / "c.toml"
    file.write_text(BASE + "[[loads]]\nname = 'x'\nsubstrate = 'local'\nshape = 'wave'\n")
    assert cli.main(["config", "check", "--config", str(file)]) == 2
    assert "loads.x.shape: must be one of sequential, staggered, burst" in capsys.readouterr().err


def test_offsets_of_each_shape() -> None:
    assert LoadPlan("local", shape="burst", n=3).offsets() == [0.0, 0.0, 0.0]
    assert LoadPlan("local", shape="staggered", n=3, every_s=0.5).offsets() == [0.0, 0.5, 1.0]
    assert LoadPlan("local", shape="sequential", n=3).offsets() is None
    assert LoadPlan("local", shape="sequential", n=3).concurrency == 1
    assert LoadPlan("local", shape="burst", n=3).concurrency == 3


def test_plan_of_puts_flags_over_a_named_load(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(
        BASE + "[[loads]]\nname = 'ramp'\nsubstrate = 'local'\nshape = 'staggered'\n"
        "every = '100ms'\nn = 5\n"
    )
    assert burst.plan_of("ramp", file) == LoadPlan("local", "T0", "staggered", 5, 0.1, name="ramp")
    assert burst.plan_of("ramp", file, n=7).n == 7
    # made a burst, it keeps no launch interval
    assert burst.plan_of("ramp", file, shape="burst") == LoadPlan("local", n=5, name="ramp")
    assert burst.plan_of(None, file) == LoadPlan("local")  # the defaults: a burst of 20 on local
    with pytest.raises(LoadError, match=r"no load 'nope' in .*defined: ramp"):
        burst.plan_of("nope", file)
    with pytest.raises(LoadError, match="every: a staggered load needs"):
        burst.plan_of(None, file, shape="staggered")


def test_burst_flag_mistakes_are_one_line(tmp_path: Path, capsys) -> None:
    db = tmp_path / "x.db"
    assert cli.main(["burst", "--shape", "staggered", "--db", str(db)]) == 2
    assert "--every: a staggered load needs the launch interval" in capsys.readouterr().err
    assert cli.main(["burst", "--every", "1s", "--db", str(db)]) == 2
    assert "--every: only a staggered load" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        cli.main(["burst", "--rollouts", "0"])
    assert info.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["burst", "--every", "0ms"])
    assert "--every: must be above 0, got 0ms" in capsys.readouterr().err
    assert not db.exists()  # refused before anything was made
