"""`make bench`: what dispatching a rollout through Ray adds, beside the local engine, per rollout.

Why side by side (docs/benchmarks.md): the same T0 rollout on the same `local` substrate is
handed alternately, in interleaved blocks, to the scheduler's two engines
(`rtax.rollouts.engines.base`): the local one (a thread of this process) and the Ray one (a task on
a one-node Ray cluster this benchmark starts for itself, small, and stops at the end). For each
rollout the dispatch cost is the time from `submit` to the finished record in hand, minus the
rollout's own wall time (what the record measured on its node): everything outside the rollout's own
timing, in both engines building and describing a fresh substrate (its toolchain fingerprint), and
through Ray also serializing the spec and the record, Ray's scheduling and the handover back to the
one writer. Printed: both p50s and the difference. Target: Ray adds at most 5 ms per rollout at p50.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import tempfile
import threading
from pathlib import Path

from rtax.analysis import stats
from rtax.assets import attrs
from rtax.compose import Composition
from rtax.rollouts.engines import Engine, LocalEngine, RolloutSpec
from rtax.rollouts.engines.ray import RayEngine
from rtax.settings import SubstrateConfig
from rtax.settings.engine import DEFAULT_LABEL, EngineSettings
from rtax.substrates.base import clock

TARGET_S = 0.005
VANTAGE = "bench"


def _verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


def _dispatch(engine: Engine, conf: SubstrateConfig, vantage: str | None) -> float:
    """One rollout through `engine`: seconds from submit to record, minus its wall time."""
    spec = RolloutSpec(conf, "T0", deadline_s=60, vantage=vantage)
    t0 = clock()
    record = engine.submit(spec).result(120)
    took = clock() - t0
    if record is None or not record.ok:
        message = record.run["error_message"] if record else "cancelled"
        raise SystemExit(f"benchmark rollout failed on {engine.name}: {message}")
    return took - record.run["wall_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=200, help="rollouts per engine")
    parser.add_argument("--block", type=int, default=20, help="rollouts per interleaved block")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured rollouts per engine")
    args = parser.parse_args()

    fixture = attrs.build()
    with tempfile.TemporaryDirectory(prefix="rtax-bench-ray-") as tmp:
        # A cluster of its own: one node, one CPU, a small object store, no dashboard, and
        # its own authentication token in the temporary folder (never ~/.ray's), set before
        # Ray is imported (it reads its authentication mode then).
        token = Path(tmp) / "auth_token"
        token.write_text(secrets.token_hex(32))
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
        import ray

        params = {"root": str(Path(tmp) / "envs"), "template": str(fixture.template)}
        conf = SubstrateConfig("local", "local", params)
        cancel = threading.Event()
        compose = Composition(emulations="off", fixture=fixture)
        local = LocalEngine(compose, cancel)
        ray.init(
            num_cpus=1,
            object_store_memory=80 * 1024 * 1024,
            include_dashboard=False,
            labels={DEFAULT_LABEL: VANTAGE},
            log_to_driver=False,
            logging_level=logging.WARNING,
            _temp_dir=str(Path(tmp) / "ray"),  # its logs and sockets go with the folder
        )
        remote = RayEngine(EngineSettings("ray", "auto", vantages=(VANTAGE,)), cancel)
        try:
            remote.start()
            for _ in range(args.warmup):
                _dispatch(local, conf, None)
                _dispatch(remote, conf, VANTAGE)
            through_local: list[float] = []
            through_ray: list[float] = []
            while len(through_ray) < args.rollouts:
                through_local += [_dispatch(local, conf, None) for _ in range(args.block)]
                through_ray += [_dispatch(remote, conf, VANTAGE) for _ in range(args.block)]
        finally:
            remote.close()
            ray.shutdown()  # the cluster ray.init started here: its processes end with it
            compose.close()

    local_p50 = stats.percentile(through_local, 50)
    ray_p50 = stats.percentile(through_ray, 50)
    added = ray_p50 - local_p50
    n = len(through_ray)
    print(
        f"ray dispatch per rollout (n={n} each): local engine p50 {local_p50 * 1e3:.2f} ms, "
        f"ray engine p50 {ray_p50 * 1e3:.2f} ms (p95 {stats.percentile(through_ray, 95) * 1e3:.2f}"
        f" ms); ray adds {added * 1e3:+.2f} ms (target <= {TARGET_S * 1e3:.0f} ms): "
        f"{_verdict(added <= TARGET_S)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
