"""Maintenance windows (rtax.analysis.maintenance, rtax.settings.maintenance,
rtax.store.maintenance, `rtax maintenance`): what a window covers, the ``[[maintenance]]`` table
and its mistakes, and the command that adds, lists and removes windows in the store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rtax import cli
from rtax.analysis.maintenance import Window, covering
from rtax.core.series import Selector, Series
from rtax.settings import config
from rtax.store.database import Store

BASE = "[[substrates]]\nname = 'docker'\nkind = 'docker'\n"
START, END = datetime(2026, 12, 5, 14, tzinfo=UTC), datetime(2026, 12, 5, 16, tzinfo=UTC)


def test_a_window_covers_its_series_while_it_lasts() -> None:
    window = Window(Selector(substrate=("docker",), tier=("T0",)), START, END, "migration")
    docker_t0 = Series("docker", fidelity="real", tier="T0")
    inside = datetime(2026, 12, 5, 15, tzinfo=UTC)
    assert window.covers(docker_t0, inside)
    assert not window.covers(docker_t0, END)  # the end is outside: [start, end)
    assert not window.covers(Series("docker", fidelity="real", tier="T2"), inside)
    assert not window.covers(Series("local", fidelity="real", tier="T0"), inside)
    assert covering([window], {"substrate": "docker", "tier": "T0"}, inside) is window
    assert window.describe() == (
        "migration (substrate docker, tier T0, 2026-12-05 14:00 → 2026-12-05 16:00 UTC)"
    )
    assert Selector().matches(docker_t0) and Selector().describe() == "every series"


def test_the_maintenance_table_is_read_back(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(
        BASE + "[[maintenance]]\nseries = { substrate = 'docker', steps = [0, 10] }\n"
        "start = 2026-12-05T14:00:00Z\nend = '2026-12-05T17:00+01:00'\nreason = 'upgrade'\n"
    )
    (window,) = config.load(file).maintenance
    assert window.selector == Selector(substrate=("docker",), steps=(0, 10))
    assert (window.start, window.end, window.reason) == (START, END, "upgrade")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("maintenance = 1\n", "maintenance"),
        ("[[maintenance]]\nstart = 2026-12-05T14:00:00Z\nend = 2026-12-05T16:00:00Z\n", "reason"),
        ("[[maintenance]]\nreason = 'x'\nend = 2026-12-05T16:00:00Z\n", "maintenance[0].start"),
        (
            "[[maintenance]]\nreason = 'x'\nstart = 'soon'\nend = 2026-12-05T16:00:00Z\n",
            "maintenance[0].start",
        ),
        (
            "[[maintenance]]\nreason = 'x'\nstart = 2026-12-05T16:00:00Z\n"
            "end = 2026-12-05T14:00:00Z\n",
            "maintenance[0].end",
        ),
        (
            "[[maintenance]]\nreason = 'x'\nstart = 2026-12-05T14:00:00Z\n"
            "end = 2026-12-05T16:00:00Z\nseries = { substrate = 'nope' }\n",
            "maintenance[0].series.substrate",
        ),
        (
            "[[maintenance]]\nreason = 'x'\nstart = 2026-12-05T14:00:00Z\n"
            "end = 2026-12-05T16:00:00Z\nseries = { zone = 'eu' }\n",
            "maintenance[0].series.zone",
        ),
        (
            "[[maintenance]]\nreason = 'x'\nstart = 2026-12-05T14:00:00Z\n"
            "end = 2026-12-05T16:00:00Z\nwhy = 'y'\n",
            "maintenance[0].why",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_its_key(tmp_path: Path, text: str, key: str) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(BASE + text)
    with pytest.raises(config.ConfigError) as info:
        config.load(file)
    assert any(key in problem for problem in info.value.problems), info.value.problems


def test_rtax_maintenance_adds_lists_and_removes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "c.toml"
    db = tmp_path / "rtax.db"
    file.write_text(f"database = '{db}'\n" + BASE)
    args = ["--config", str(file)]
    assert (
        cli.main(
            [
                "maintenance",
                "add",
                *args,
                "--series",
                "substrate=docker",
                "--series",
                "tier=T0,T2",
                "--start",
                "2099-01-01T10:00",
                "--for",
                "2h",
                "--reason",
                "rebuild",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("maintenance window #1: rebuild (substrate docker, tier T0 or T2,")
    assert "2099-01-01 10:00 → 2099-01-01 12:00 UTC" in out
    with Store(db) as store:
        (row,) = store.maintenance.read()
        assert row["series"] == Selector(substrate=("docker",), tier=("T0", "T2"))
        assert (row["start"], row["end"]) == (
            "2099-01-01T10:00:00.000000+00:00",
            "2099-01-01T12:00:00.000000+00:00",
        )
    assert cli.main(["maintenance", "list", *args]) == 0
    assert "#1  rebuild (substrate docker" in capsys.readouterr().out
    assert cli.main(["maintenance", "remove", "1", *args]) == 0
    assert cli.main(["maintenance", "list", *args]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "no maintenance windows"
    assert cli.main(["maintenance", "remove", "1", *args]) == 2
    assert "no maintenance window #1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--series", "substrate=nope", "--for", "1h"], "--series.substrate: unknown substrate"),
        (["--series", "docker", "--for", "1h"], "--series: 'docker': write DIMENSION=VALUE"),
        (["--series", "steps=ten", "--for", "1h"], "steps are whole numbers"),
        (["--start", "tomorrow", "--for", "1h"], "--start: not a time: 'tomorrow'"),
        (["--start", "2099-01-01T10:00", "--end", "2099-01-01T09:00"], "--end: must be after"),
    ],
)
def test_a_bad_window_is_refused_in_one_line_and_nothing_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    file = tmp_path / "c.toml"
    db = tmp_path / "rtax.db"
    file.write_text(f"database = '{db}'\n" + BASE)
    code = cli.main(["maintenance", "add", "--config", str(file), *flags, "--reason", "r"])
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("rtax maintenance: error: ") and message in line, line
    assert not db.exists() or Store(db).maintenance.read() == []
