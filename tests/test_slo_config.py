"""The ``[[slos]]`` tables (rtax.settings.slos): read back with their defaults, the shipped
objectives, and every mistake one line naming its key, from `rtax config check` too."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtax import cli
from rtax.analysis.slo import DEFAULT_BURN, Burn, Objective
from rtax.core.paths import checkout_root
from rtax.core.series import Selector
from rtax.settings import config

BASE = """
[[substrates]]
name = "docker"
kind = "docker"
[[substrates]]
name = "docker-gvisor"
kind = "docker"
params = { runtime = "runsc" }
"""
ENTRY = '[[slos]]\nname = "s"\ntarget = 0.99\n'


def _load(tmp_path: Path, text: str) -> config.Config:
    file = tmp_path / "c.toml"
    file.write_text(BASE + text)
    return config.load(file)


def test_an_objective_read_back(tmp_path: Path) -> None:
    conf = _load(
        tmp_path,
        """
[[slos]]
name = "docker-start"
series = { substrate = ["docker", "docker-gvisor"], tier = "T0" }
time_to_first_command = "1s"
target = 0.99
period = "7d"
burn = [{ long = "2h", short = "10m", factor = 10 }]
[[slos]]
name = "success"
success = true
target = 0.995
[[slos]]
name = "episodes"
series = { tier = "T2", steps = [10, 50] }
episode = "90s"
target = 0.9
""",
    )
    start, success, episodes = conf.slos
    assert start == Objective(
        "docker-start",
        Selector(substrate=("docker", "docker-gvisor"), tier=("T0",)),
        "time_to_first_command",
        0.99,
        1.0,
        7 * 86_400.0,
        (Burn(7200.0, 600.0, 10.0),),
    )
    assert success == Objective("success", Selector(), "success_rate", 0.995)
    assert success.period_s == 28 * 86_400 and success.burn == DEFAULT_BURN
    assert (episodes.metric, episodes.threshold_s, episodes.selector.steps) == (
        "episode",
        90.0,
        (10, 50),
    )
    assert _load(tmp_path, ENTRY + "success = true\nburn = []\n").slos[0].burn == ()


def test_the_shipped_objectives() -> None:
    """Cold starts (T0) of the three shipped substrates, each against a threshold a few times
    what it takes on a quiet machine, and one success objective over them: what
    `rtax config check` prints."""
    conf = config.load(checkout_root() / "rtax.toml")
    by_name = {o.name: o for o in conf.slos}
    latency = [o for o in conf.slos if o.is_latency]
    assert {o.selector.substrate for o in latency} == {("local",), ("docker",), ("docker-gvisor",)}
    assert all(o.selector.tier == ("T0",) and o.target == 0.99 for o in latency)
    assert by_name["success"].metric == "success_rate" and by_name["success"].target == 0.995
    assert all(o.period_s == 28 * 86_400 and o.burn == DEFAULT_BURN for o in conf.slos)


def test_config_check_names_the_objectives(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["config", "check", "--config", str(checkout_root() / "rtax.toml")]) == 0
    out = capsys.readouterr().out
    assert "objectives local-start, docker-start, gvisor-start, success" in out


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("slos = 3\n", "slos"),
        ("[[slos]]\ntarget = 0.99\nsuccess = true\n", "slos[0].name"),
        (ENTRY, "slos.s"),  # no indicator
        (ENTRY + "success = true\nepisode = '1s'\n", "slos.s"),  # two
        (ENTRY + "success = false\n", "slos.s.success"),
        (ENTRY + "time_to_first_command = 'quick'\n", "slos.s.time_to_first_command"),
        (ENTRY + "episode = '-1s'\n", "slos.s.episode"),
        ('[[slos]]\nname = "s"\nsuccess = true\n', "slos.s.target"),
        ('[[slos]]\nname = "s"\nsuccess = true\ntarget = 1\n', "slos.s.target"),
        ('[[slos]]\nname = "s"\nsuccess = true\ntarget = 99\n', "slos.s.target"),
        (ENTRY + "success = true\nperiod = 'monthly'\n", "slos.s.period"),
        (ENTRY + "success = true\nperiod = '60d'\n", "slos.s.period"),  # raw runs: 30 days
        (ENTRY + "success = true\nseries = { substrate = 'nope' }\n", "slos.s.series.substrate"),
        (ENTRY + "success = true\nseries = { colour = 'red' }\n", "slos.s.series.colour"),
        (ENTRY + "success = true\nseries = 'docker'\n", "slos.s.series"),
        (ENTRY + "success = true\nslow = '1s'\n", "slos.s.slow"),
        (ENTRY + "success = true\nburn = 'fast'\n", "slos.s.burn"),
        (ENTRY + "success = true\nburn = [3]\n", "slos.s.burn[0]"),
        (ENTRY + "success = true\nburn = [{ long = '1h' }]\n", "slos.s.burn[0]"),
        (
            ENTRY + "success = true\nburn = [{ long = '1h', short = '2h', factor = 2 }]\n",
            "slos.s.burn[0].short",
        ),
        (
            ENTRY + "success = true\nburn = [{ long = '1h', short = '5m', factor = 0 }]\n",
            "slos.s.burn[0].factor",
        ),
        (
            ENTRY + "success = true\nburn = [{ long = 'soon', short = '5m', factor = 2 }]\n",
            "slos.s.burn[0].long",
        ),
        (
            ENTRY + "success = true\nperiod = '1d'\n"
            "burn = [{ long = '2d', short = '5m', factor = 2 }]\n",
            "slos.s.burn[0].long",
        ),
        (
            ENTRY + "success = true\nburn = [{ long = '1h', short = '5m', factor = 2, x = 1 }]\n",
            "slos.s.burn[0].x",
        ),
        (ENTRY + "success = true\n" + ENTRY + "success = true\n", "slos.s"),  # twice
        (
            ENTRY + "success = true\n[alerts]\n[[alerts.rules]]\nname = 's burn 14.4x 1h/5m'\n"
            "success_below = 0.5\n",
            "slos.s",
        ),
    ],
)
def test_each_slo_mistake_names_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str
) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(text + BASE)  # top-level keys first
    with pytest.raises(config.ConfigError) as info:
        config.load(file)
    assert any(f": {key}: " in p for p in info.value.problems), info.value.problems
    assert cli.main(["config", "check", "--config", str(file)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith("rtax config: error: ") for line in lines)
    assert any(f": {key}: " in line for line in lines)
