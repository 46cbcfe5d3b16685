"""Daily budgets: the arithmetic the scheduler applies and the overview shows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from factories import make_record
from rtax.service import budget
from rtax.settings import ConfigError, SubstrateConfig, config
from rtax.store.database import Store


def _conf(**kw) -> SubstrateConfig:
    return SubstrateConfig("cloud", "ec2", **kw)


def test_day_start_is_midnight_utc() -> None:
    now = datetime(2026, 11, 29, 23, 59, 59, tzinfo=UTC)
    assert budget.day_start(now) == datetime(2026, 11, 29, tzinfo=UTC)


def test_exceeded_names_the_budget_that_ran_out() -> None:
    assert budget.exceeded(_conf(), 10_000, 1e9) is None
    assert budget.exceeded(_conf(max_rollouts_per_day=3), 2, 0) is None
    assert "3 of 3 rollouts" in budget.exceeded(_conf(max_rollouts_per_day=3), 3, 0)
    both = _conf(max_rollouts_per_day=100, max_env_minutes_per_day=30)
    assert budget.exceeded(both, 5, 29.9) is None
    assert "30.0 of 30 environment-minutes" in budget.exceeded(both, 5, 30.0)


def test_store_spend_sums_wall_time_per_substrate_since(db_path: Path) -> None:
    with Store(db_path) as store:
        store.save_rollout(make_record("a", substrate="ec2", wall_s=90.0, fidelity="emulated"))
        store.save_rollout(make_record("b", substrate="ec2", wall_s=30.0, fidelity="emulated"))
        store.save_rollout(make_record("c", substrate="ec2", wall_s=None, status="failed"))
        store.save_rollout(
            make_record("d", substrate="ec2", wall_s=600.0, started_at="2024-01-01T00:00:00+00:00")
        )
        spend = store.runs.spend(since="2025-01-01T00:00:00+00:00")
    assert budget.spent(spend, "ec2") == (3, pytest.approx(2.0))
    assert budget.spent(spend, "absent") == (0, 0.0)


def test_spend_table_lists_configured_and_unconfigured_substrates(db_path: Path) -> None:
    with Store(db_path) as store:
        store.save_rollout(make_record("a", substrate="ec2", wall_s=120.0, fidelity="emulated"))
        store.save_rollout(make_record("b", substrate="local", wall_s=6.0))
        spend = store.runs.spend()
    configured = {
        "ec2": SubstrateConfig("ec2", "ec2", max_env_minutes_per_day=2.0),
        "daytona": SubstrateConfig("daytona", "daytona", max_rollouts_per_day=5),
    }
    table = budget.spend_table(spend, configured).set_index("substrate")
    assert list(table.index) == ["daytona", "ec2", "local"]
    assert table.loc["ec2", "env_minutes"] == 2.0
    assert table.loc["ec2", "fidelity"] == "emulated"
    assert table.loc["ec2", "status"].startswith("budget used up")
    assert table.loc["daytona", "rollouts"] == 0
    assert table.loc["daytona", "status"] == "within budget"
    assert table.loc["local", "status"].startswith("no budget")


def _parse(entry: str, tmp_path: Path):
    file = tmp_path / "rtax.toml"
    file.write_text(f'[[substrates]]\nname = "x"\nkind = "local"\n{entry}\n')
    return config.load(file)


def test_config_reads_env_minute_budgets(tmp_path: Path) -> None:
    conf = _parse("max_env_minutes_per_day = 90", tmp_path)
    assert conf.substrates["x"].max_env_minutes_per_day == 90.0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "true", '"lots"'])
def test_config_rejects_bad_env_minute_budgets(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="max_env_minutes_per_day"):
        _parse(f"max_env_minutes_per_day = {value}", tmp_path)
