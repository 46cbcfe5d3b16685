"""The detection evaluation (rtax.analysis.evaluation, rtax.analysis.replay, `rtax
detection-eval`): fixed seeds of every family replayed through the shipped rules hold the
targets at a small size, the table says MISSES with the figure when a target is missed, the
real recorded series are quiet, and a CSV of one's own is replayed with its incidents' sample
indexes."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from rtax import cli
from rtax.analysis import evaluation, replay
from rtax.core.paths import checkout_root
from rtax.settings import config

SHIPPED = config.load(checkout_root() / "rtax.toml")
RULES, DETECTION = SHIPPED.alerts.rules, SHIPPED.detection
STATIONARY = [f for f in evaluation.FAMILIES if not f.change]
CHANGES = {f.name: f for f in evaluation.FAMILIES if f.change}


@pytest.mark.parametrize("family", STATIONARY, ids=[f.name for f in STATIONARY])
def test_a_stationary_family_is_quiet_on_fixed_seeds(family: evaluation.Family) -> None:
    """Three series of 2,000 samples (the first 200 a window filling up): at the target, 0.12
    false incidents per 1,000 samples, the expected count is 0.72; these seeds open at most
    one (`make detection-eval` measures the rate on 100,000 samples a family)."""
    row = evaluation.run_family(family, RULES, DETECTION, series=3, length=2000, trials=0)
    assert row.incidents <= 1, row


def test_a_1_5x_step_is_found_within_ten_samples_on_fixed_seeds() -> None:
    row = evaluation.run_family(
        CHANGES["step 1.5x"], RULES, DETECTION, series=0, length=0, trials=40
    )
    assert row.within_10 >= 0.95 and row.meets is True, row
    assert row.delay_p50 is not None and row.delay_p50 <= 6


def test_success_dropping_to_half_is_found_within_five_samples_typically() -> None:
    row = evaluation.run_family(
        CHANGES["success 100 % -> 50 %"], RULES, DETECTION, series=0, length=0, trials=40
    )
    assert row.detected == 1.0 and row.delay_p50 <= 5 and row.meets is True, row


def test_larger_steps_are_found_sooner_than_smaller_ones() -> None:
    delays = [
        evaluation.run_family(CHANGES[name], RULES, DETECTION, series=0, length=0, trials=30)
        for name in ("step 1.25x", "step 1.5x", "step 3x")
    ]
    assert [r.within_10 for r in delays] == sorted(r.within_10 for r in delays)
    assert delays[-1].within_10 == 1.0


def test_a_missed_target_says_misses_with_its_figure() -> None:
    found = [[replay.Incident(i, i, "r", "m", "d", 2.0)] for i in range(3)]
    row = evaluation.stationary_row("noisy", found, 1000, 300.0)
    assert row.per_1000 == pytest.approx(3.0) and row.meets is False
    assert row.per_month == pytest.approx(3.0 / 1000 * 8640)
    (line,) = [x for x in evaluation.table([row]) if x.startswith("noisy")]
    assert "3.000" in line and line.endswith("<= 0.12 / 1,000: MISSES target")


def test_the_families_are_what_their_names_say() -> None:
    """Each generator, seeded, makes what the table calls it (a family that drifted from its
    name would make the table a lie)."""
    rng = np.random.default_rng
    x, _ = evaluation.bimodal(0.2, 2.0)(rng(1), 20000)
    assert np.mean(x > 1.6) == pytest.approx(0.2, abs=0.02)  # the slow mode, 2x the body
    x, _ = evaluation.step(1.5)(rng(1), 300)
    assert np.median(x[200:]) / np.median(x[:200]) == pytest.approx(1.5, rel=0.1)
    x, _ = evaluation.ar1(0.8)(rng(1), 20000)
    logs = np.log(x)
    assert np.corrcoef(logs[1:], logs[:-1])[0, 1] == pytest.approx(0.8, abs=0.03)
    assert logs.std() == pytest.approx(evaluation.SIGMA, rel=0.1)
    _, ok = evaluation.success_drop(0.5)(rng(1), 2200)
    assert ok[:200].all() and ok[200:].mean() == pytest.approx(0.5, abs=0.03)
    _, ok = evaluation.failing(0.01)(rng(1), 50000)
    assert 1 - ok.mean() == pytest.approx(0.01, abs=0.002)


#: What the shipped rules open on each recorded series (benchmarks/series/README.md lists each
#: incident with the change of the host's load it came with).
RECORDED_INCIDENTS = {
    "docker T0": 1,
    "docker T2": 0,
    "docker-gvisor T0": 1,
    "docker-gvisor T2": 0,
    "local T0": 6,
    "local T2": 2,
}


def test_the_recorded_real_series_replay_as_documented() -> None:
    """The real series shipped in benchmarks/series/, replayed whole through the shipped rules,
    open the incidents its README lists, no more and no fewer: a change of the detector's
    behaviour on real data shows here. The recording is shorter than the 2,000 rollouts per
    series the evaluation asks for and was made while this machine worked on other things, and
    every incident came with a change of the host's load (the README has the figures), so its
    rate stands in the evaluation's table against the target, MISSES and all; what is pinned
    here is only that the replay is what the README says."""
    path = checkout_root() / "benchmarks" / "series" / "recorded.csv.gz"
    assert path.is_file(), f"{path} is missing: benchmarks/series/README.md says how it is made"
    with gzip.open(path, "rt") as f:
        recordings = replay.read_series(f.readlines())
    assert set(recordings) == set(RECORDED_INCIDENTS)
    opened = {}
    for name, recording in recordings.items():
        assert len(recording) >= 450, name
        opened[name] = len(replay.replay(recording, RULES, DETECTION))
    assert opened == RECORDED_INCIDENTS


def test_a_csv_of_ones_own_is_replayed_with_sample_indexes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    x = np.exp(rng.normal(0, 0.1, 400))
    x[300:] *= 2
    plain = tmp_path / "plain.csv"
    plain.write_text("\n".join(f"{v:.5f}" for v in x) + "\n")
    assert cli.main(["detection-eval", "--series", str(plain)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{plain} (plain): 400 samples, 1 incidents"
    assert out[1].startswith("  sample 30") and "ttfc-change opened (from sample 30" in out[1]
    flagged = tmp_path / "flags.csv"
    rows = ["latency_s,ok"] + [f"{v:.5f},1" for v in x[:250]] + ["," + "0"] * 6
    flagged.write_text("\n".join(rows) + "\n")
    assert cli.main(["detection-eval", "--series", str(flagged)]) == 0
    out = capsys.readouterr().out
    assert "success-change opened (from sample 250)" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no samples"),
        ("0.5\nabc\n", "line 2: 'abc' is not a latency in seconds"),
        ("0.5\n-1\n", "line 2: a latency must be a number of seconds > 0"),
        ("latency_s,ok\n0.5,maybe\n", "line 2: ok must be 1/0, true/false or ok/failed"),
    ],
)
def test_a_bad_series_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    assert cli.main(["detection-eval", "--series", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"rtax detection-eval: error: {bad}: {message}" or message in err, err
    assert cli.main(["detection-eval", "--series", str(tmp_path / "none.csv")]) == 2
    assert "cannot read" in capsys.readouterr().err
