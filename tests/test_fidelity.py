"""Fidelity that cannot lie (docs/measurement.md#fidelity): every emulation says so on every
response, and an adapter that hears it labels its samples `emulated` whatever its configuration
says."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from polling import DEADLINE_S
from rtax.core import workloads
from rtax.core.options import RolloutOptions
from rtax.rollouts.rollout import run_rollout
from rtax.settings import SubstrateConfig, config
from rtax.store.database import Store
from rtax.substrates import build_substrate
from rtax.substrates.emulated import EMULATION_HEADER, EmulationWatch


def test_the_watch_is_sticky_and_case_blind() -> None:
    watch = EmulationWatch()
    watch.observe({"Content-Type": "application/json"})
    assert watch.fidelity("real") == "real"
    watch.observe({EMULATION_HEADER.lower(): "ec2"})  # botocore's parsed headers are lowercase
    assert watch.fidelity("real") == "emulated" and watch.kind == "ec2"
    watch.observe({})  # a later answer without the header does not make it real again
    assert watch.fidelity("real") == "emulated"
    assert EmulationWatch().fidelity("modelled") == "modelled"


def _loaded(tmp_path: Path, entry: str) -> SubstrateConfig:
    """A configuration entry as a user writes it: no `emulate = true`, fidelity not set."""
    file = tmp_path / "rtax.toml"
    file.write_text(f'database = "rtax.db"\n[[substrates]]\n{entry}\n')
    (conf,) = config.load(file).substrates.values()
    assert not conf.emulate and "fidelity" not in conf.params
    return conf


def _probe_and_store(conf: SubstrateConfig, db: Path) -> dict:
    substrate = build_substrate(conf)
    assert substrate.fidelity == "real"  # what the configuration says, before any answer
    record = run_rollout(substrate, workloads.build("T0"), options=RolloutOptions(deadline_s=300))
    with Store(db) as store:
        store.save_rollout(record)
        (row,) = store.runs.read().to_dict("records")
    return row


def test_an_ec2_entry_pointing_at_the_emulation_is_stored_as_emulated(
    tmp_path: Path, runner_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rtax.emulation.ec2 import INSTANCE_PROFILE, Ec2Emulation

    # A `real` EC2 entry takes AWS's credential chain; the emulation accepts any key.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
    with Ec2Emulation(image=runner_image) as emu:
        params = emu.substrate_params()
        conf = _loaded(
            tmp_path,
            f'name = "ec2-lab"\nkind = "ec2"\nparams = {{ endpoint = "{emu.url}", '
            f'region = "{params["region"]}", ami = "{params["ami"]}", '
            f'instance_profile = "{INSTANCE_PROFILE}" }}',
        )
        row = _probe_and_store(conf, tmp_path / "runs.db")
    assert (row["status"], row["fidelity"]) == ("ok", "emulated"), row["error_message"]


def test_a_daytona_entry_pointing_at_the_emulation_is_stored_as_emulated(
    tmp_path: Path, runner_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rtax.emulation.daytona import DaytonaEmulation

    with DaytonaEmulation(image=runner_image) as emu:
        params = emu.substrate_params()
        monkeypatch.setenv("RTAX_TEST_DAYTONA_KEY", params["api_key"])
        conf = _loaded(
            tmp_path,
            f'name = "daytona-lab"\nkind = "daytona"\nparams = {{ api_url = "{params["api_url"]}", '
            f'target = "{params["target"]}", snapshot = "{params["snapshot"]}", '
            'api_key_env = "RTAX_TEST_DAYTONA_KEY" }',
        )
        row = _probe_and_store(conf, tmp_path / "runs.db")
    assert (row["status"], row["fidelity"]) == ("ok", "emulated"), row["error_message"]


@pytest.mark.parametrize("kind", ["kubernetes", "ec2", "daytona"])
def test_every_emulation_stamps_its_answers_even_refusals(kind: str, runner_image: str) -> None:
    """Any path, any status: an unauthenticated request to an unknown route still says it."""
    from rtax.emulation import get_emulation

    with get_emulation(kind, image=runner_image) as emu:
        request = urllib.request.Request(f"{emu.url}/no/such/route")
        try:
            with urllib.request.urlopen(request, timeout=DEADLINE_S) as answer:
                headers = answer.headers
        except urllib.error.HTTPError as refused:
            headers = refused.headers
    assert headers[EMULATION_HEADER] == kind
