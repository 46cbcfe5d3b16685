"""The soak's figures (benchmarks/soak.py, docs/soak.md): slopes, floors, the accounting of
started rollouts and the verdicts, from hand-made samples; and the fast configuration it makes
from the shipped rtax.toml, checked by the real config loader.

Why: the soak runs for an hour and prints a verdict; a verdict that passed a leak (or failed a
flat line) must fail here, in seconds, not after the hour.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import soak  # noqa: E402  (a script beside the benchmarks, not a package)
from soak import Accounting, Sample  # noqa: E402

from rtax.settings import config as rtax_config  # noqa: E402


def test_slope_per_hour_of_a_line_and_of_too_little() -> None:
    # 2 MB every 30 minutes is 4 MB an hour
    assert soak.slope_per_hour([(0, 100.0), (1800, 102.0), (3600, 104.0)]) == pytest.approx(4.0)
    assert soak.slope_per_hour([(10, 1.0)]) is None
    assert soak.slope_per_hour([(10, 1.0), (10, 2.0)]) is None


def test_floor_rise_ignores_busy_peaks_and_sees_a_leak() -> None:
    # a rollout in flight holds files: peaks come and go, the floor stays
    assert soak.floor_rise([10, 18, 10, 17, 10, 19, 10, 18]) == 0
    # one file more after every rollout: the floor climbs
    assert soak.floor_rise([10, 18, 11, 19, 12, 20, 13, 21]) == 2
    assert soak.floor_rise([10, 11, 12]) is None


def test_warm_up_is_ten_minutes_or_a_third_of_a_short_run() -> None:
    assert soak.warm_up_s(60) == 600
    assert soak.warm_up_s(5) == 100


def _samples(minutes: float, every_s: float, rss_per_h: float, fd_leak: int = 0) -> list[Sample]:
    out, t, i = [], 0.0, 0
    while t <= minutes * 60:
        busy = 6 if i % 2 else 0
        rss = 80 + rss_per_h * t / 3600
        out.append(Sample(t, rss, 12 + busy + fd_leak * i, 9, 1.0, 0.5, rss - 20, 20.0))
        t += every_s
        i += 1
    return out


def _judged(samples: list[Sample], minutes: float, acc: Accounting) -> dict[str, bool | None]:
    return {v.target: v.ok for v in soak.verdicts(samples, minutes, acc)}


def _clean() -> Accounting:
    acc = Accounting(started=3, abandoned=1)
    acc.finished = {"a": "local", "b": "docker"}
    acc.stored, acc.spooled = 1, 1
    return acc


def test_an_hour_that_holds_every_target() -> None:
    got = _judged(_samples(60, 60, rss_per_h=1.0), 60, _clean())
    assert got == {
        "resident memory": True,
        "open files": True,
        "threads": True,
        "WAL": True,
        "rollouts accounted for": True,
    }


def test_an_hour_that_leaks_memory_and_files_misses_both() -> None:
    got = _judged(_samples(60, 60, rss_per_h=12.0, fd_leak=1), 60, _clean())
    assert got["resident memory"] is False
    assert got["open files"] is False
    assert got["threads"] is True


def test_a_short_run_prints_the_memory_slope_but_does_not_judge_it() -> None:
    verdict = next(
        v
        for v in soak.verdicts(_samples(5, 6, rss_per_h=40.0), 5, _clean())
        if v.target == "resident memory"
    )
    assert verdict.ok is None
    assert "+40.0 MB/h" in verdict.figure and "not judged" in verdict.figure


def test_a_big_wal_misses() -> None:
    samples = _samples(60, 60, rss_per_h=0.0)
    samples[30] = Sample(samples[30].t, 80, 12, 9, 1.0, 70.0, 60.0, 20.0)
    assert _judged(samples, 60, _clean())["WAL"] is False


def test_accounting_finds_a_started_rollout_that_vanished() -> None:
    lines = [
        "x INFO rollout started: local T0 (plan cold-start)",
        "x INFO rollout finished: local ok [run aa11]",
        "x INFO rollout started: docker T0 (plan cold-start)",
        "x INFO rollout started: docker T1 (plan inspect)",
        "x INFO rollout abandoned (stopping): docker (plan inspect)",
    ]
    acc = Accounting()
    soak.account(lines, acc)
    acc.stored = 1
    assert (acc.started, len(acc.finished), acc.abandoned) == (3, 1, 1)
    assert acc.unaccounted == 1  # the docker T0: started, never finished nor abandoned
    acc.finished["bb22"] = "docker"
    assert acc.unaccounted == 1  # announced now, but neither stored nor spooled
    acc.spooled = 1
    assert acc.unaccounted == 0
    assert _judged(_samples(60, 60, 0.0), 60, acc)["rollouts accounted for"] is True
    assert _judged(_samples(60, 60, 0.0), 60, Accounting())["rollouts accounted for"] is False


def test_the_fast_config_is_the_shipped_one_ten_times_faster(tmp_path: Path) -> None:
    shipped = rtax_config.load(ROOT / "rtax.toml")
    path = tmp_path / "soak.toml"
    path.write_text(soak.fast_config((ROOT / "rtax.toml").read_text(), tmp_path / "s.db", 9999))
    fast = rtax_config.load(path)
    assert str(fast.database) == str(tmp_path / "s.db")
    assert fast.metrics.port == 9999
    assert [p.name for p in fast.plans] == [p.name for p in shipped.plans]
    for mine, theirs in zip(fast.plans, shipped.plans, strict=True):
        assert mine.interval_s == pytest.approx(theirs.interval_s / soak.SPEED)
        assert mine.jitter_s == pytest.approx(max(1, round(theirs.jitter_s / soak.SPEED)))
    # everything else as shipped
    assert fast.slos == shipped.slos
    assert fast.retention == shipped.retention
    assert fast.concurrency == shipped.concurrency


def test_the_report_names_each_verdict_and_the_other_failures() -> None:
    text = soak.report(
        _samples(60, 60, rss_per_h=12.0), 60, _clean(), {"webhook posts": 3}, ["the scheduler died"]
    )
    assert "resident memory: +12.00 MB/h after the warm-up" in text
    assert "MISSES target" in text and "webhook posts: 3" in text
    assert "FAILED: the scheduler died" in text
    assert text.splitlines()[-1] == "rtax soak summary: 1 of 5 MISSED; 1 other failure"


def test_the_report_splits_resident_memory_into_anonymous_and_file_backed() -> None:
    # the heap grows 12 MB/h, the file-backed pages stay at 20 MB: the report says which
    text = soak.report(_samples(60, 60, rss_per_h=12.0), 60, _clean(), {})
    lines = text.splitlines()
    anon = next(line for line in lines if line.strip().startswith("anonymous"))
    filed = next(line for line in lines if line.strip().startswith("file-backed"))
    assert "slope after warm-up +12.00MB/h" in anon
    assert "slope after warm-up +0.00MB/h" in filed


def test_samples_are_written_a_row_at_a_time_and_read_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "samples.csv"
    samples = _samples(10, 60, rss_per_h=3.0)
    for i, sample in enumerate(samples):
        soak.write_sample(path, sample)
        if i == 2:  # a soak cut short here still has its first three minutes, header and all
            assert soak.read_samples(path) == samples[:3]
    assert soak.read_samples(path) == samples
    assert path.read_text().splitlines()[0] == ",".join(soak.CSV_COLUMNS)
    assert path.read_text().count("rss_anon_mb") == 1  # one header, not one per row


def test_proc_status_reads_this_process() -> None:
    import os

    got = soak.proc_status(os.getpid())
    # RssAnon + RssFile + RssShmem is VmRSS; the shared part of a test process is small
    assert got.rss_anon_mb > 0 and got.rss_file_mb > 0
    assert got.rss_anon_mb + got.rss_file_mb <= got.rss_mb + 0.01
    assert got.rss_anon_mb + got.rss_file_mb > 0.5 * got.rss_mb
    assert got.fds >= 3 and got.threads >= 1
    # 64 MB of heap, every page written (a block this size is its own mapping, so no freed
    # memory is reused): the anonymous part rises by it, the file-backed part does not. This
    # is what tells the two fields apart if they were ever read swapped.
    block = b"x" * (64 << 20)
    after = soak.proc_status(os.getpid())
    assert after.rss_anon_mb - got.rss_anon_mb > 56
    assert abs(after.rss_file_mb - got.rss_file_mb) < 8
    del block


def test_warnings_are_summarised_by_kind_most_common_first() -> None:
    lines = [
        "2026-12-06 04:16:56,189 WARNING rollout 3f2a9c1e77 on docker failed after 1.25 s",
        "2026-12-06 04:17:06,002 WARNING rollout 9bc0d4e1aa on docker failed after 0.5 s",
        "2026-12-06 04:18:00,000 ERROR reaper: cannot use podman: boom",
    ]
    assert soak.common_lines(lines) == [
        "2 x WARNING rollout # on docker failed after # s",
        "1 x ERROR reaper: cannot use podman: boom",
    ]
    assert soak.common_lines(lines, most=1) == ["2 x WARNING rollout # on docker failed after # s"]
    assert soak.common_lines([]) == []
