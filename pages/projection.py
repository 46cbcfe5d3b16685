"""Projection: worker-hours, extra hours, spread, wall-clock time and cost for a fleet plan."""

import math

import streamlit as st

from rtax.analysis import stats
from rtax.core.series import workload_name
from rtax.dashboard import (
    data,
    explore,
    figures,
    filters,
    fleet,
    format,
    style,
    summarized,
    tables,
    urlstate,
)
from rtax.planning import poolmodel, projection, published, steptime
from rtax.substrates.base import FIDELITIES

#: One fit per sample and failure policy (the costly part); every B, G and x is then read from
#: it in milliseconds (rtax.planning.steptime).
_fit = st.cache_data(max_entries=16, show_spinner=False)(steptime.fit)
#: One pool simulation per pool input set: a burst of 5,000 claims is a fifth of a second of
#: pure Python, which a move of any other slider should not pay again.
_simulate = st.cache_data(max_entries=16, show_spinner=False)(poolmodel.simulate)

st.title("Projection")
chosen = filters.current()
rows = data.summary(data.database(), chosen.key, ("episode_s",))
rows = filters.for_comparison(rows, chosen)
path = st.segmented_control(
    "Launch path",
    [fleet.EVERY_PATH, *summarized.PATH_ORDER],
    default=fleet.EVERY_PATH,
    required=True,
    help="How each environment gets ready: cold (made), warm (claimed from a pool), restore "
    "(from a snapshot), resume (thawed from a paused pool). The projection, step time and "
    "costs use that path's measured samples (the Paths page compares them).",
    **urlstate.bound("proj_path"),
)
rows = fleet.on_path(rows, path)

st.caption(
    "Only series that ran the local floor's workload toolchain are projected (series marked "
    "'(toolchain ≠ floor)' timed other programs); the sidebar can let them in."
)
TRAJECTORIES = explore.log_values(1_000, 100_000_000)
trajectories = explore.slider(
    "Trajectories",
    "proj_trajectories",
    TRAJECTORIES,
    1_000_000,
    min_value=1,
    max_value=1_000_000_000,
    help="A log scale from 1 k to 100 M; the box beside takes any exact count.",
)
a, b = st.columns(2)
steps = explore.slider(
    "Actions per trajectory",
    "proj_steps",
    list(range(1, 501)),
    150,
    min_value=1,
    max_value=500,
    show=str,
    where=a,
)
workers = explore.slider(
    "Parallel workers",
    "proj_workers",
    explore.log_values(1, 1_000_000),
    1_000,
    min_value=1,
    max_value=10_000_000,
    where=b,
)
which = st.segmented_control(
    "Seconds per trajectory",
    list(projection.STATISTICS),
    default=projection.TOTAL,
    format_func=lambda s: "mean (total)" if s == projection.TOTAL else f"what-if {s}",
    required=True,
    help="; ".join(f"{k}: {v}" for k, v in projection.LABELS.items()),
    **urlstate.bound("proj_stat"),
)
if which == projection.TOTAL:
    st.caption(
        "Worker-hours and costs are totals: N trajectories take N × mean seconds (the sum of "
        "their times). N × p50 would under-state a right-skewed distribution such as cold "
        "starts; p50 and p95 are offered as what-ifs only (docs/measurement.md#statistics)."
    )
else:
    st.warning(
        f"What-if: {projection.LABELS[which]}. These hours are not the expected total, which "
        "is N × mean (choose “mean (total)”)."
    )

#: $/h on the price sliders: 0, then 1-2-3-5 per decade from a cent to $100.
PRICES = explore.log_values(0.01, 100.0, zero=True)
found, lacking = summarized.estimates(rows, int(steps), which)
setting = {
    "trajectories": format.short(trajectories),
    "actions": str(int(steps)),
    "workers": format.short(workers),
    "seconds per trajectory": which,
    "launch path": path,
}
if found:
    with st.expander("Price per worker-hour (optional)"):
        prices = {
            name: explore.slider(
                f"{name} ($/h)",
                f"price_{name}",
                PRICES,
                0.0,
                min_value=0.0,
                max_value=1_000.0,
                step=0.01,
                show=format.usd_per_hour,
            )
            for name in found
        }
    prices = {k: v for k, v in prices.items() if v > 0}
    fidelity_of = rows.drop_duplicates("series").set_index("series")["fidelity"].to_dict()
    # One table per fidelity: extra hours and spreads across real and emulated series would
    # compare a measurement with an emulation.
    for fidelity in FIDELITIES:
        names = [k for k in found if fidelity_of.get(k) == fidelity]
        if not names:
            continue
        table = projection.project(
            {k: found[k].seconds for k in names},
            trajectories=int(trajectories),
            workers=int(workers),
            prices=prices,
        )
        table["basis"] = [found[s].basis for s in table["substrate"]]
        table["n"] = [found[s].n for s in table["substrate"]]
        st.subheader(f"{fidelity.capitalize()} series")
        ratio = projection.spread(table["worker_hours"])
        m1, m2 = st.columns(2)
        m1.metric(
            f"Spread, {fidelity} (max / min worker-hours)",
            "n/a" if math.isnan(ratio) else format.ratio(ratio),
        )
        m2.metric(
            f"Extra hours of the slowest over the best, {fidelity}",
            format.hours(table["extra_hours"].max()),
        )
        best = table.iloc[0]
        line = explore.changed_line(
            f"proj_{fidelity}",
            setting | {f"price of {k}": format.usd_per_hour(v) for k, v in prices.items()},
            {
                f"worker-hours of {best['substrate']}": best["worker_hours"],
                "extra hours of the slowest": table["extra_hours"].max(),
                f"wall clock of {best['substrate']}": best["wall_clock_hours"],
            },
        )
        if line:
            st.caption(f"What changed: {line}.")
        st.plotly_chart(
            figures.projection_bars(
                table,
                f"{int(trajectories):,} trajectories × {int(steps)} actions "
                f"({projection.LABELS[which]}, {fidelity})",
            ),
            key=f"proj_bars_{fidelity}",
        )
        style.table(table, snapshot=f"projection-{fidelity}")
else:
    st.info(
        "No substrate has trajectory data for a projection yet"
        + ("" if path == fleet.EVERY_PATH else f" on the {path} path")
        + ": run `rtax probe --tier T2 --steps 10`, `--steps 50` and `--steps 150`"
        + ("" if path == fleet.EVERY_PATH else " there (docs/configuration.md#launch-paths)")
        + "."
    )
if lacking:
    st.warning("Lacking data: " + "; ".join(f"**{k}**: {v}" for k, v in lacking.items()))

st.subheader("Scenarios: the study, reproduced from its inputs")
style.table(tables.scenarios(), snapshot="projection-scenarios")
st.caption(
    "Headlines quoted (inputs unpublished, not recomputed): "
    + "; ".join(published.HEADLINES)
    + f". Source: {published.SOURCE}."
)

# -- Fleet planning: warm pools, tail-aware step time, limits and prices ---------------------
# Raw samples (the newest runs of the window) feed the two models that resample them.
runs = filters.for_comparison(data.newest_runs(data.database(), chosen.key), chosen)
sample = fleet.on_path(runs, path)
st.header("Fleet planning")
st.caption(
    f"The models resample the raw samples of the newest {data.DISTRIBUTION_ROWS:,} runs of the "
    "window (successful runs only); docs/measurement.md#warm-pool-model and "
    "#tail-aware-step-time say how."
)

st.subheader("Size a warm pool")
# A pool is refilled by cold starts whatever path its claims take: the cold path's samples,
# as probed (a load run's enter through fleet.refills, at the burst's size).
cold = fleet.samples(fleet.quiet(fleet.on_path(runs, "cold")), "time_to_first_command_s")
if not cold:
    st.info("No cold starts measured yet: run `rtax probe --tier T0` on a substrate.")
else:
    p1, p2, p3 = st.columns(3)
    pool_series = p1.selectbox("Cold starts of", list(cold), **urlstate.bound("proj_pool_series"))
    pool_size = explore.slider(
        "Pool size",
        "proj_pool_size",
        explore.log_values(1, 10_000, zero=True),
        10,
        min_value=0,
        max_value=10_000,
        where=p2,
    )
    # The real pool accepts 1 <= refills <= size (rtax.settings.pool): so does the model.
    most = max(1, int(pool_size))
    if int(st.session_state.get("proj_pool_refill", 1)) > most:
        st.session_state["proj_pool_refill"] = most
    refill = p3.number_input(
        "Refill concurrency", 1, most, min(4, most), **urlstate.bound("proj_pool_refill")
    )
    q1, q2, q3, q4 = st.columns(4)
    shape = q1.selectbox(
        "Load shape", poolmodel.SHAPES, index=2, **urlstate.bound("proj_pool_shape")
    )
    claims = q2.number_input("Claims", 1, 5_000, 50, **urlstate.bound("proj_pool_claims"))
    every_ms = q3.number_input(
        "Every (ms)",
        1.0,
        3_600_000.0,
        100.0,
        help="staggered: one claim every this many ms; sequential: the time one rollout holds "
        "its environment; burst: unused",
        **urlstate.bound("proj_pool_every_ms"),
    )
    claim_ms = q4.number_input(
        "Claim cost (ms)", 0.0, 60_000.0, 0.0, **urlstate.bound("proj_pool_claim_ms")
    )
if cold and int(pool_size) == 0:
    st.info("Pool size 0: no pool; every rollout makes its own environment (a cold start).")
elif cold:
    loads = data.load_runs(data.database(), chosen.key)
    refill_s, level, busy = fleet.refills(
        cold[pool_series],
        runs,
        pool_series,
        loads,
        data.load_rollouts(data.database(), tuple(loads["load_id"])),
        shape,
        int(claims),
        int(refill),
    )
    pool = _simulate(
        refill_s,
        poolmodel.arrivals(shape, int(claims), every_ms / 1000),
        int(pool_size),
        int(refill),
        claim_s=claim_ms / 1000,
    )
    m1, m2, m3, m4, m5 = st.columns(5)
    m1.metric("Claim p50", format.duration(pool.p50_s))
    m2.metric("Claim p95", format.duration(pool.p95_s))
    m3.metric("Claim p99", format.duration(pool.p99_s))
    m4.metric("Chance the pool drains", f"{pool.drain_probability:.0%}")
    m5.metric("Mean wait", format.duration(pool.mean_wait_s))
    line = explore.changed_line(
        "proj_pool",
        {
            "series": pool_series,
            "pool size": str(pool_size),
            "refill": str(refill),
            "shape": shape,
            "claims": str(claims),
            "every": format.duration(every_ms / 1000),
            "claim cost": format.duration(claim_ms / 1000),
        },
        {"claim p95": pool.p95_s, "mean wait": pool.mean_wait_s},
        show=format.duration,
    )
    if line:
        st.caption(f"What changed: {line}.")
    if level is None:
        drawn = (
            f"n={refill_s.size} measured cold starts (time to first command) of {pool_series} "
            f"as probed, p50 {format.duration(stats.percentile(refill_s, 50))}"
        )
        contention = (
            "These are quiet cold starts: under a burst refills run slower, so a burst's waits "
            "can be longer than predicted; a load run of this substrate (`rtax burst`, the "
            "Capacity page) at the burst's size lets the model draw from cold starts measured "
            "under it."
        )
    else:
        drawn = (
            f"n={refill_s.size} cold starts of {pool_series}'s substrate at {level:.3g} at "
            f"once, read off load runs (the Capacity page), p50 "
            f"{format.duration(stats.percentile(refill_s, 50))}, against "
            f"{format.duration(stats.percentile(cold[pool_series], 50))} as probed"
        )
        share = (
            f"busy {busy:.0%} of that time, as this series' quiet rollouts run on after their "
            "first command"
            if busy is not None
            else "assumed busy all of that time: no quiet rollout of this series to measure"
        )
        contention = (
            f"A burst of {int(claims)} contends with its own refills: they are drawn at the "
            f"{level:.3g} environments at work while its refills are made ({int(refill)} "
            f"refills and the rollouts they last served, {share}), between the load-run levels "
            "measured around it by interpolation. A refill worker's turn also weighs what it "
            "made (`make bench` measures it), not in these samples."
        )
        if refill > 2:
            contention += (
                " Checked against measured Docker bursts, this forecast held within 20 % with 1 "
                "or 2 refills at once and came out high with 4 (p95 up to +31 %): with more "
                "than 2, read it as an upper bound."
            )
    st.caption(
        f"Predicted from {drawn}; {pool.n:,} simulated claims ({pool.repeats} seeded "
        "repeats; fewer for bursts beyond 1,000 claims). A pool refills with cold starts "
        "whichever launch path is chosen above. A claim that finds the pool empty waits, "
        "first come first served, for the next environment to become ready; a slot's "
        "refill is asked for when its claim is served, as in the real pool. "
        f"{contention} (docs/measurement.md#warm-pool-model)"
    )

st.subheader("Tail-aware step time")
shapes = fleet.workloads(sample)
if not shapes:
    st.info("No rollouts measured yet: run `rtax probe --tier T2 --steps 10`.")
else:
    s1, s2, s3, s4 = st.columns(4)
    tier, length = s1.selectbox(
        "Rollouts",
        shapes,
        format_func=lambda w: workload_name(*w),
        **urlstate.bound("proj_step_workload"),
    )
    measured = fleet.outcomes(sample, "episode_s", tier=tier, steps=length)
    step_series = s2.selectbox("Of", list(measured), **urlstate.bound("proj_step_series"))
    batch = s3.number_input(
        "Prompts per step (B)", 1, 100_000, 32, **urlstate.bound("proj_step_batch")
    )
    group = s4.number_input(
        "Samples per prompt (G)", 1, 1_000, 8, **urlstate.bound("proj_step_group")
    )
    o1, o2, o3 = st.columns(3)
    oversample = o1.number_input(
        "Over-sampling x (launch B·G·(1 + x), keep the first B·G)",
        0.0,
        10.0,
        0.0,
        0.05,
        **urlstate.bound("proj_step_oversample"),
    )
    retry = o2.selectbox(
        "A failed rollout",
        (False, True),
        format_func=lambda r: "is retried once" if r else "holds the step to its deadline",
        **urlstate.bound("proj_step_retry"),
    )
    deadline = o3.number_input(
        "Rollout deadline (s)",
        1.0,
        86_400.0,
        data.rollout_deadline_s(),
        60.0,
        **urlstate.bound("proj_step_deadline"),
    )
    ok, failed = measured[step_series]
    fitted = _fit(ok, failed, deadline_s=float(deadline), retry=bool(retry))
    step = steptime.step_time(fitted, int(batch), int(group), oversample=oversample)
    n1, n2, n3 = st.columns(3)
    measured_from = (
        f"from n = {step.n:,} successful and {step.failures:,} failed rollouts of {step_series}"
    )
    if step.low_s is None:
        about = f"extrapolated: {step.extrapolated}"
    else:
        about = (
            f"{step.confidence:.0%} interval {format.duration(step.low_s)}–"
            f"{format.duration(step.high_s)} (bootstrap over the tail fit)"
        )
    n1.metric(f"Expected step time, {step.statistic}", format.duration(step.expected_s), help=about)
    n2.metric("Naive: the mean rollout", format.duration(step.mean_s))
    n3.metric("Launched per step", f"{step.launched:,}", help=f"keeps {step.rollouts:,}")
    st.caption(
        f"{about}; {measured_from}. A step of B·G = {step.rollouts:,} waits for the slowest "
        "(with over-sampling, for the B·G-th to finish), so the tail, not the median, sets it; "
        "a failed rollout holds it to the deadline or, retried, costs a second rollout."
    )
    if step.low_s is None:
        st.warning(f"Extrapolated, no interval: {step.extrapolated}.")

st.subheader("Limits, prices and dollars")
leak_default_min = data.leak_runs_on_s() / 60
PLAN_METRICS = ("wall_s", "actions_s", "time_to_first_command_s")
substrates = data.configured_substrates()
if not fleet.configured(substrates):
    st.info(
        "No limits or prices are configured: add `limits` and `prices` (each price with its "
        "source and date) to a `[[substrates]]` entry (docs/configuration.md#limits-and-prices)."
    )
else:
    plan = fleet.plan_costs(
        fleet.on_path(
            filters.for_comparison(data.summary(data.database(), chosen.key, PLAN_METRICS), chosen),
            path,
        ),
        substrates,
        trajectories=int(trajectories),
        steps=int(steps),
        workers=int(workers),
        pool_size=int(pool_size) if cold else 0,
    )
    if plan.empty:
        st.info(
            f"No configured substrate has runs of {int(steps)} actions: run "
            f"`rtax probe --tier T2 --steps {int(steps)}` on one."
        )
    else:
        style.table(plan, snapshot="projection-plan")
        st.caption(
            f"{int(trajectories):,} trajectories of {int(steps)} actions on {int(workers):,} "
            f"workers, a warm pool of {int(pool_size) if cold else 0:,} (the pool size above; 0 "
            "without measured cold starts). Floor: the slowest of the create rate, the "
            "concurrency limit and the workers. Billed: create request to verified deletion per "
            "rollout (mean wall) plus the pool's idle environments; useful: the actions. "
            "Dollars count only the prices set (`prices_unset` lists the others)."
        )

    st.subheader("Dollars per successful rollout")
    r1, r2, r3 = st.columns(3)
    retries = r1.number_input(
        "Retries of a failed rollout", 0, 10, 1, **urlstate.bound("proj_cost_retries")
    )
    idle_h = r2.number_input(
        "Pool idle (hours each)", 0.0, 8_760.0, 0.0, 0.5, **urlstate.bound("proj_cost_idle_h")
    )
    leak_min = r3.number_input(
        "A leaked environment runs on (min)",
        0.0,
        10_080.0,
        leak_default_min,
        5.0,
        help="until the reaper removes it: a live owner's leftover goes when it expires "
        "(the rollout's deadline plus a grace), found at the next reap",
        **urlstate.bound("proj_cost_leak_min"),
    )
    costs = fleet.per_success(
        fleet.on_path(runs, path),
        substrates,
        steps=int(steps),
        retries=int(retries),
        pool_size=int(pool_size) if cold else 0,
        pool_idle_s=idle_h * 3600,
        leak_runs_on_s=leak_min * 60,
        rollouts=int(trajectories),
    )
    if costs.empty:
        st.info(f"No substrate with prices has runs of {int(steps)} actions.")
    else:
        style.table(costs, snapshot="projection-per-success")
        st.caption(
            "Per successful rollout, from the raw attempts of the window: the measured success "
            f"rate with up to {int(retries)} retries (attempts per success), each attempt's "
            "lifetime rounded by the provider's billing rule, environments whose cleanup failed "
            f"running on {leak_min:g} min, and a pool of {int(pool_size) if cold else 0:,} idle "
            f"{idle_h:g} h each spread over {int(trajectories):,} rollouts. "
            "`usd_per_million_env_hour` is the figure above (mean successful lifetime x the "
            "hourly price); `difference` is what failures, retries, billing, leaks and the pool "
            "add to it. Worker-hours count each attempt's lifetime only."
        )
