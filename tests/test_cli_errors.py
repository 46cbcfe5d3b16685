"""The CLI's error paths: exit code 2 and exactly one line on stderr naming the problem, never a
traceback; plus the probe -> export success path on the real local substrate (T0)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest

from polling import DEADLINE_S
from rtax import cli
from rtax.assets.attrs import Fixture
from rtax.core import paths


@pytest.fixture(autouse=True)
def envs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The local substrate's environments go to this test's own folder."""
    root = tmp_path / "envs"
    monkeypatch.setenv("RTAX_LOCAL_ROOT", str(root))
    return root


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "rtax.db"


def one_error_line(err: str) -> str:
    """The single line on stderr; fails unless there is exactly one and it is not a traceback."""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert err.endswith("\n")
    assert "error" in lines[0]
    return lines[0]


def run_main(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Call `rtax.cli.main`, turning argparse's SystemExit into a return code."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


# -- argparse errors: SystemExit(2) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["probe", "--tier", "T9"], ("--tier", "T9")),
        (["probe", "--repeat", "0"], ("--repeat", "at least 1")),
        (["probe", "--repeat", "abc"], ("--repeat", "abc")),
        (["probe", "--steps", "-1"], ("--steps", "-1")),
        (["probe", "--deadline", "0"], ("--deadline", "positive")),
        (["probe", "--deadline", "inf"], ("--deadline", "positive")),
        (["probe", "--deadline", "soon"], ("--deadline", "soon")),
        (["export", "--table", "bogus", "--out", "x.csv"], ("--table", "bogus")),
        (["export", "--out", "x.csv"], ("--table",)),  # --table is required
        (["bogus"], ("bogus",)),
        (["probe", "--seed", str(2**63)], ("--seed", "at most")),
        (["probe", "--mode", "turbo"], ("--mode", "turbo")),
        (["fixtures", "--serve", "--port", "99999"], ("--port", "65535")),
        (["reap", "--older-than", "-5"], ("--older-than",)),
    ],
)
def test_argparse_errors_exit_2_with_one_line(
    argv: list[str], names: tuple[str, ...], db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main([*argv, "--db", str(db)] if argv[0] in ("probe", "export") else argv)
    assert info.value.code == cli.EXIT_USAGE == 2
    out, err = capsys.readouterr()
    assert out == ""
    line = one_error_line(err)
    assert line.startswith("rtax")
    for name in names:
        assert name in line
    assert "usage:" not in err  # one line, no usage dump
    assert not db.exists()  # refused before touching the database


# -- library errors: main() returns 2 --------------------------------------------------------


def test_steps_need_tier_t2(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(
        ["probe", "--tier", "T0", "--steps", "10", "--db", str(db), "--quiet"], capsys
    )
    assert code == 2
    assert out == ""
    line = one_error_line(err)
    assert line.startswith("rtax probe: error:")
    assert "T2" in line and "steps" in line
    assert not db.exists()  # validated before any slow work, database untouched


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--tier", "T0", "--commit", "abc"], ("--commit", "T2")),
        (["--tier", "T1", "--repo-url", "git://x/y"], ("--repo-url", "T2")),
        (["--tier", "T2", "--repo-url", "path", "--substrate", "docker"], ("path", "docker")),
    ],
)
def test_t2_only_flags_are_checked(
    argv: list[str], words: tuple[str, ...], db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        import docker  # noqa: F401 - the docker case needs only the SDK, not an engine
    except ImportError:
        pytest.skip("docker SDK missing")
    code, out, err = run_main(["probe", *argv, "--db", str(db), "--quiet"], capsys)
    line = one_error_line(err)
    if code == 2 and "cannot use substrate docker" in line:
        pytest.skip("no Docker engine to build the docker substrate against")
    assert code == 2 and out == ""
    for word in words:
        assert word in line
    assert not db.exists()


def test_unknown_substrate_kind(
    db: Path, attrs_fixture: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(
        ["probe", "--substrate", "warp-drive", "--db", str(db), "--quiet"], capsys
    )
    assert code == 2
    assert out == ""
    line = one_error_line(err)
    assert line.startswith("rtax probe: error:")
    assert "warp-drive" in line
    assert "local" in line  # names the known kinds


def test_probe_db_in_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "missing" / "rtax.db"
    code, out, err = run_main(["probe", "--db", str(db), "--quiet"], capsys)
    assert code == 2
    assert out == ""
    line = one_error_line(err)
    assert str(db.parent) in line and "does not exist" in line
    assert not db.parent.exists()


@pytest.mark.parametrize("command", ["probe", "export"])
def test_db_that_is_a_folder(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    argv = [command, "--db", str(folder)]
    if command == "probe":
        argv.append("--quiet")
    else:
        argv += ["--table", "runs", "--out", str(tmp_path / "out.csv")]
    code, out, err = run_main(argv, capsys)
    assert code == 2
    assert out == ""
    line = one_error_line(err)
    assert str(folder) in line and "folder" in line
    assert list(folder.iterdir()) == []  # nothing written inside it


def test_export_from_missing_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "absent.db"
    out_csv = tmp_path / "runs.csv"
    code, out, err = run_main(
        ["export", "--db", str(db), "--table", "runs", "--out", str(out_csv)], capsys
    )
    assert code == 2
    assert out == ""
    line = one_error_line(err)
    assert line.startswith("rtax export: error:")
    assert str(db) in line and "no database" in line
    assert not db.exists()  # export never creates a database
    assert not out_csv.exists()


def test_export_out_into_missing_folder(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_csv = tmp_path / "nowhere" / "runs.csv"
    code, out, err = run_main(
        ["export", "--db", str(db), "--table", "runs", "--out", str(out_csv)], capsys
    )
    assert code == 2
    assert out == ""
    line = one_error_line(err)
    assert "--out" in line and str(out_csv.parent) in line
    assert not out_csv.parent.exists()


def test_export_out_is_a_folder(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(
        ["export", "--db", str(db), "--table", "runs", "--out", str(tmp_path)], capsys
    )
    assert code == 2
    assert out == ""
    line = one_error_line(err)
    assert "--out" in line and "folder" in line


def test_missing_fix_patch_with_t2(
    db: Path, tmp_path: Path, attrs_fixture: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    patch = tmp_path / "no-such.patch"
    code, out, err = run_main(
        ["probe", "--tier", "T2", "--fix-patch", str(patch), "--db", str(db), "--quiet"], capsys
    )
    assert code == 2
    assert out == ""
    line = one_error_line(err)
    assert "--fix-patch" in line and str(patch) in line
    # No rollout was run or recorded.
    cli.main(["export", "--db", str(db), "--table", "runs", "--out", str(tmp_path / "r.csv")])
    assert pd.read_csv(tmp_path / "r.csv").empty


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--db", "{tmp}/absent.db", "--table", "runs", "--out", "{tmp}/r.csv"],
        ["probe", "--tier", "T0", "--steps", "10", "--db", "{tmp}/rtax.db", "--quiet"],
    ],
    ids=["missing-db", "steps-on-t0"],
)
def test_no_traceback_reaches_stderr_of_the_process(tmp_path: Path, argv: list[str]) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", "rtax", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    line = one_error_line(proc.stderr)
    assert line.startswith("rtax ")
    assert not (tmp_path / "rtax.db").exists()
    assert not (tmp_path / "absent.db").exists()


# -- success path ----------------------------------------------------------------------------


def test_probe_then_export_runs_and_actions(
    db: Path,
    tmp_path: Path,
    envs_root: Path,
    attrs_fixture: Fixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_main(
        ["probe", "--tier", "T0", "--repeat", "2", "--db", str(db), "--quiet"], capsys
    )
    assert code == 0, err
    assert out == ""  # --quiet: no summary
    assert err == ""  # and no progress bar
    assert db.is_file()
    # Environments were made under RTAX_LOCAL_ROOT and cleaned up.
    assert envs_root.is_dir()
    assert list(envs_root.iterdir()) == []

    runs_csv = tmp_path / "runs.csv"
    code, out, err = run_main(
        ["export", "--db", str(db), "--table", "runs", "--out", str(runs_csv)], capsys
    )
    assert code == 0
    assert "wrote 2 runs rows" in err
    runs = pd.read_csv(runs_csv)
    assert len(runs) == 2
    assert runs["status"].tolist() == ["ok", "ok"]
    assert set(runs["substrate"]) == {"local"}
    assert set(runs["tier"]) == {"T0"}
    assert runs["run_id"].is_unique
    assert (runs["wall_s"] > 0).all()
    assert (runs["n_actions"] == 1).all()

    actions_csv = tmp_path / "actions.csv"
    code, out, err = run_main(
        ["export", "--db", str(db), "--table", "actions", "--out", str(actions_csv)], capsys
    )
    assert code == 0
    assert "wrote 4 actions rows" in err
    actions = pd.read_csv(actions_csv)
    assert len(actions) == 4
    assert sorted(actions["phase"]) == ["action", "action", "ready", "ready"]
    assert set(actions["run_id"]) == set(runs["run_id"])
    assert (actions["ok"] == 1).all()

    # Export filters pass through: there are no T1 runs.
    code, _, err = run_main(
        ["export", "--db", str(db), "--table", "runs", "--tier", "T1", "--out", str(runs_csv)],
        capsys,
    )
    assert code == 0
    assert "wrote 0 runs rows" in err


# -- substrate names from the configuration ---------------------------------------------------


def _config_file(tmp_path: Path, body: str) -> Path:
    file = tmp_path / "probe.toml"
    file.write_text(body)
    return file


def test_probe_a_substrate_named_in_the_configuration(
    tmp_path: Path, db: Path, capsys, attrs_fixture: Fixture
) -> None:
    roots = tmp_path / "named-envs"
    conf = _config_file(
        tmp_path,
        f'[[substrates]]\nname = "scratch"\nkind = "local"\nparams = {{ root = "{roots}" }}\n',
    )
    code, _, err = run_main(
        ["probe", "--substrate", "scratch", "--config", str(conf), "--db", str(db), "--quiet"],
        capsys,
    )
    assert code == 0, err
    from rtax.store.database import Store

    with Store(db, create=False) as store:
        runs = store.runs.read()
    assert list(runs["substrate"]) == ["scratch"] and list(runs["status"]) == ["ok"]
    assert roots.is_dir()  # the configured parameter was used


def test_probe_without_db_writes_to_the_database_its_configuration_names(
    tmp_path: Path, capsys, attrs_fixture: Fixture
) -> None:
    """`--config` without `--db`: the rollouts go to the file's `database` (relative to the
    file), not to data/rtax.db, and the summary names that file."""
    roots = tmp_path / "named-envs"
    conf = _config_file(
        tmp_path,
        'database = "named.db"\n'
        f'[[substrates]]\nname = "scratch"\nkind = "local"\nparams = {{ root = "{roots}" }}\n',
    )
    default = paths.default_db()
    before = default.stat().st_mtime_ns if default.exists() else None
    code, out, err = run_main(["probe", "--substrate", "scratch", "--config", str(conf)], capsys)
    assert code == 0, err
    from rtax.store.database import Store

    with Store(tmp_path / "named.db", create=False) as store:
        assert list(store.runs.read()["substrate"]) == ["scratch"]
    assert str(tmp_path / "named.db") in out + err
    assert (default.stat().st_mtime_ns if default.exists() else None) == before


def test_unknown_and_unstarted_emulated_names_are_one_line_errors(tmp_path: Path, capsys) -> None:
    conf = _config_file(
        tmp_path, '[[substrates]]\nname = "k8s-demo"\nkind = "kubernetes"\nemulate = true\n'
    )
    code, _, err = run_main(["probe", "--substrate", "nope", "--config", str(conf)], capsys)
    assert code == 2 and "define it in rtax.toml" in one_error_line(err)
    code, _, err = run_main(["probe", "--substrate", "k8s-demo", "--config", str(conf)], capsys)
    assert code == 2 and "rtax emulate kubernetes" in one_error_line(err)


def test_reap_visits_configured_substrates(tmp_path: Path, capsys) -> None:
    """A leftover of a configured name, whose owner is gone, is found and reaped by default."""
    import json

    from rtax.substrates.local import LocalSubstrate

    roots = tmp_path / "named-envs"
    conf = _config_file(
        tmp_path,
        f'[[substrates]]\nname = "scratch"\nkind = "local"\nparams = {{ root = "{roots}" }}\n',
    )
    sub = LocalSubstrate(name="scratch", root=roots)
    env = sub.create("planted")
    meta = next(roots.rglob(".rtax-env.json"), None)
    assert meta is not None, "the local substrate keeps its label in a JSON file"
    label = json.loads(meta.read_text())
    owner = label["rtax.owner"]
    label["rtax.owner"] = f"{owner.rpartition(':')[0]}:999999999"  # a pid that can't exist
    meta.write_text(json.dumps(label))
    code, out, err = run_main(["reap", "--config", str(conf)], capsys)
    assert code == 0, err
    assert "removed scratch" in out and "planted" in out
    assert [lo for lo in sub.leftovers() if lo.run_id == env.run_id] == []
