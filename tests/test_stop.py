"""A stop that arrives without its exception still stops (docs/cli.md).

Python drops an exception that a signal handler raises while a finalizer runs (a Popen's
``__del__``), so the CLI's handlers also set a flag; the batch watches it between rollouts and
the runner at every step. Seen in CI: SIGTERM to `rtax probe` printed "Exception ignored in:
<function Popen.__del__ ...> ... Terminated" and the batch went on."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from rtax import cli
from rtax.rollouts import probe
from rtax.service import stopping
from rtax.store.database import Store


def test_a_stop_flag_ends_the_batch_and_stores_nothing_half_done(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    done = probe.probe(probe.Probe("local", tier="T0", repeat=3, db=tmp_path / "x.db"), stop=stop)
    assert isinstance(done.interrupted, KeyboardInterrupt)
    assert done.records == []
    with Store(tmp_path / "x.db") as store:
        assert store.runs.count() == 0


class _SignalsInFinalizer:
    """Sends SIGTERM to this process from inside a finalizer, where the handler's exception is
    lost, exactly as when the signal lands in a Popen's ``__del__``."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_lost_in_a_finalizer_still_ends_the_cli_with_143(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def config_check(args: object) -> int:
        obj = _SignalsInFinalizer()
        del obj  # the handler runs inside __del__: its Terminated is printed and dropped
        gc.collect()
        return 0

    lost: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: lost.append(u.exc_value))
    monkeypatch.setattr(cli, "cmd_config", config_check)
    assert cli.main(["config", "check"]) == cli.EXIT_TERMINATED
    assert [type(e) for e in lost] == [stopping.Terminated]  # the exception really was lost
    assert "terminated; cleaned up" in capsys.readouterr().err


def test_a_second_signal_does_not_cut_the_first_ones_clean_up_short() -> None:
    """Ctrl-C in a terminal reaches every process of the group, and `make run` then sends its
    scheduler SIGTERM too: the second signal lands in the clean-up the first began, which
    must run to its end (an exception there once left a scheduler's containers behind)."""
    cleaned: list[str] = []
    with pytest.raises(KeyboardInterrupt), stopping.signals():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            stopping.STOP.wait(60)  # the handler raises here, in the main thread
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # the second, mid clean-up
            cleaned.append("pools")
            cleaned.append("snapshots")
    assert cleaned == ["pools", "snapshots"]
    assert stopping.terminated()  # the SIGTERM was kept: the exit code says so
