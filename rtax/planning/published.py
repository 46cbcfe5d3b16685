"""Published reference figures, kept apart from measurements and always labelled as published.

Why here and not in the database: these numbers were not measured by rtax; they are the study's
own results (arXiv 2607.01415, "The Rollout Infrastructure Tax in Coding-Agent RL", 2026, and a
companion write-up by the same authors), shown as an overlay and used to check that the
projection model reproduces the study from its inputs (docs/measurement.md#projection).
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "arXiv 2607.01415 (2026)"
COMPANION = "companion write-up by the authors of arXiv 2607.01415"


@dataclass(frozen=True)
class TrajectoryPoint:
    """A published trajectory completion time: `steps` actions took `seconds` on `substrate`."""

    substrate: str
    steps: int
    seconds: float
    source: str


#: 50-action trajectory times from the companion write-up.
TRAJECTORY_POINTS = (
    TrajectoryPoint("hosted sandbox", 50, 12.9, COMPANION),
    TrajectoryPoint("Kubernetes", 50, 20.1, COMPANION),
    TrajectoryPoint("EC2", 50, 30.5, COMPANION),
    TrajectoryPoint("ECS/Fargate", 50, 161.5, COMPANION),
)


@dataclass(frozen=True)
class Scenario:
    """One published worker-hour figure and the inputs it comes from.

    worker-hours = (per_rollout_s + per_action_s * steps) * rollouts / 3600

    A per-rollout figure times the count is a total only if the figure is a mean; when rtax
    projects its own measurements it feeds this formula their mean (docs/measurement.md#projection).
    """

    name: str
    rollouts: int
    steps: int
    per_rollout_s: float
    per_action_s: float
    published_hours: float
    source: str


#: Table 1 of the study, and the companion's 10,000 x 50-action figures.
SCENARIOS = (
    Scenario("+1 s per rollout, 1M rollouts", 1_000_000, 0, 1.0, 0.0, 278, SOURCE),
    Scenario("+10 ms per action, 1M x 150 actions", 1_000_000, 150, 0.0, 0.010, 417, SOURCE),
    Scenario("+100 ms per action, 1M x 150 actions", 1_000_000, 150, 0.0, 0.100, 4_167, SOURCE),
    Scenario("hosted sandbox, 10,000 x 50 actions (12.9 s)", 10_000, 50, 12.9, 0.0, 36, COMPANION),
    Scenario("Kubernetes, 10,000 x 50 actions (20.1 s)", 10_000, 50, 20.1, 0.0, 56, COMPANION),
    Scenario("ECS/Fargate, 10,000 x 50 actions (161.5 s)", 10_000, 50, 161.5, 0.0, 449, COMPANION),
)

#: Headlines of the study, quoted (their inputs are not published, so they are not recomputed).
HEADLINES = (
    "up to 110x cold-start spread across substrates at T0, narrowing to ~1.9x at T2",
    "1.8x spread in projected worker-hours for one million 150-step trajectories "
    "(5,316 extra hours)",
)
