"""EC2 instances of the ec2 substrate: the launch request, their state, their end, and leftovers.

Why apart from the commands: an instance's life (``RunInstances`` -> ``DescribeInstances`` ->
``TerminateInstances``) is EC2's API and SSM's commands are another; the commands only ask this
module whether an instance is still there. What EC2 adds to every kind's rules is eventual
consistency: a just-launched instance may be invisible for a while (so "not found" is "not yet"
for `VISIBLE_WITHIN_S`, and never proof of removal), and a launch whose answer was lost is found
again through its ``ClientToken``. Tags are the kit's labels (`kit.labels`, `kit.selector`,
`kit.leftover`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from rtax.core.failures import CleanupFailed, EnvironmentLost, RateLimited, SubstrateError
from rtax.substrates import kit
from rtax.substrates.base import Environment, Leftover, RateLimitWait, clock
from rtax.substrates.ec2.api import (
    THROTTLE_CODES,
    Aws,
    api_errors,
    botocore_errors,
    code,
    message,
    status,
)

#: How long a just-launched instance may stay invisible to the API (eventual consistency).
VISIBLE_WITHIN_S = 30.0
#: Instance states in which an instance still exists (and still costs, or will).
ALIVE = ("pending", "running", "stopping", "stopped", "shutting-down")
GONE = ("shutting-down", "terminated")


def may_have_launched(exc: BaseException) -> bool:
    """Whether RunInstances may have launched an instance although it raised `exc`: anything
    but a definite refusal. Refusals are a 4xx answer, a server error that names the reason
    nothing was launched (``Insufficient*Capacity``) and throttling (``RequestLimitExceeded``
    refuses the request); a 500 ``InternalError``, a 503 ``Unavailable``, a lost answer or an
    interrupt leave it unknown (`rtax.substrates.base.RateLimited` is judged by its last
    refusal)."""
    errors = botocore_errors()
    if isinstance(exc, RateLimited):
        cause = exc.__cause__
        return cause is not None and may_have_launched(cause)
    if isinstance(exc, errors.ClientError):
        answered = status(exc) or 500
        refused = code(exc).startswith("Insufficient") or code(exc) in THROTTLE_CODES
        return answered >= 500 and not refused
    return True


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def launch_request(
    run_id: str,
    name: str,
    *,
    ami: str,
    instance_type: str,
    tags: dict[str, str],
    subnet_id: str | None,
    security_group_ids: list[str],
    instance_profile: str | None,
    lifetime_s: float | None = None,
) -> dict[str, Any]:
    """RunInstances' arguments: one instance, the kit's labels as tags (over the user's own),
    and shutdown = terminate, so that an instance that powers itself off stops costing."""
    tagged = tag_list({**tags, "Name": f"rtax-{run_id}", **kit.labels(run_id, name, lifetime_s)})
    request: dict[str, Any] = {
        "ImageId": ami,
        "InstanceType": instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "InstanceInitiatedShutdownBehavior": "terminate",
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tagged},
            {"ResourceType": "volume", "Tags": tagged},
        ],
        # idempotent: a throttled-then-retried launch can't make two instances
        "ClientToken": run_id[:64],
    }
    if subnet_id:
        request["SubnetId"] = subnet_id
    if security_group_ids:
        request["SecurityGroupIds"] = security_group_ids
    if instance_profile:
        key = "Arn" if instance_profile.startswith("arn:") else "Name"
        request["IamInstanceProfile"] = {key: instance_profile}
    return request


class Instances:
    """The instances of the substrate named `name`; state is polled every `interval_s`."""

    def __init__(self, aws: Aws, name: str, interval_s: float) -> None:
        self.aws = aws
        self.name = name
        self.interval_s = interval_s

    def describe(
        self, instance_id: str, waits: list[RateLimitWait] | None = None
    ) -> dict[str, Any] | None:
        """The instance as DescribeInstances shows it; None when EC2 does not know it."""
        try:
            answer = self.aws.call(
                self.aws.ec2, "describe_instances", waits=waits, InstanceIds=[instance_id]
            )
        except botocore_errors().ClientError as exc:
            if code(exc) == "InvalidInstanceID.NotFound":
                return None
            raise
        for reservation in answer.get("Reservations") or []:
            for instance in reservation.get("Instances") or []:
                return instance
        return None

    def check_alive(self, env: Environment) -> None:
        """Raise `EnvironmentLost` if the instance is gone or going."""
        instance = self.describe(env.env_id, env.rate_limit_waits)
        state = (instance or {}).get("State", {}).get("Name")
        if instance is None or state in GONE:
            raise EnvironmentLost(f"instance {env.env_id} is {state or 'gone'}")

    def lost_or_not(self, env: Environment) -> None:
        """`EnvironmentLost` if the instance is gone; any other failure to tell is ignored, so
        that the caller's own error (a timeout) stands."""
        try:
            self.check_alive(env)
        except EnvironmentLost:
            raise
        except (SubstrateError, *api_errors()):
            pass

    def terminate_and_wait(
        self, instance_id: str, timeout_s: float, waits: list[RateLimitWait]
    ) -> float:
        """Terminate, then poll until terminated; returns the resolution of both polls. An
        instance never visible to TerminateInstances is `CleanupFailed`, not "gone"."""
        errors = botocore_errors()
        deadline = clock() + timeout_s
        unseen_until = min(deadline, clock() + VISIBLE_WITHIN_S)
        last: list[str | None] = [None]

        def terminating() -> bool | None:
            try:
                self.aws.call(
                    self.aws.ec2, "terminate_instances", waits=waits, InstanceIds=[instance_id]
                )
                return True
            except errors.ClientError as exc:
                if code(exc) != "InvalidInstanceID.NotFound":
                    raise
            # Not found: not visible yet (just launched: EC2 is eventually consistent), or
            # terminated so long ago that EC2 forgot it (about an hour).
            return None

        def terminated() -> bool | None:
            instance = self.describe(instance_id, waits)
            last[0] = (instance or {}).get("State", {}).get("Name")
            return True if instance is None or last[0] == "terminated" else None

        class _NeverSeen(Exception):
            pass

        try:
            try:
                sent = kit.poll(
                    terminating,
                    interval_s=self.interval_s,
                    deadline=unseen_until,
                    timeout=_NeverSeen,
                )
            except _NeverSeen:
                # Not proof that it is gone: an instance this run launched (or the reaper just
                # listed) that EC2 won't show may still run. It keeps its tags: a leftover.
                raise CleanupFailed(
                    f"instance {instance_id} not visible to TerminateInstances within "
                    f"{min(timeout_s, VISIBLE_WITHIN_S):g} s: cannot verify that it is gone"
                ) from None
            gone = kit.poll(
                terminated,
                interval_s=self.interval_s,
                deadline=deadline,
                timeout=lambda: CleanupFailed(
                    f"instance {instance_id} still {last[0]} after {timeout_s:g} s"
                ),
            )
            return sent.resolution_s + gone.resolution_s
        except (RateLimited, *api_errors()) as exc:
            text = message(exc) if isinstance(exc, errors.ClientError) else str(exc)
            raise CleanupFailed(f"terminate {instance_id}: {text}") from exc

    def terminate_lost_launch(self, request: dict[str, Any], run_id: str) -> None:
        """Best effort after a RunInstances that may have launched (`may_have_launched`). The
        same request with the same ClientToken is idempotent: it answers the instance the lost
        request launched (or launches one if it never arrived), which is then terminated. The
        search by run id tag comes after, for anything else with the run's tag (it may not show
        a new instance for a while). What is still missed carries the run's tags, expiry
        included, and the reaper terminates it."""
        ec2 = self.aws.ec2
        ids: set[str] = set()
        with contextlib.suppress(Exception):  # the original failure is what the row reports
            answer = self.aws.call(ec2, "run_instances", **request)
            ids.update(i["InstanceId"] for i in answer.get("Instances") or [])
        with contextlib.suppress(Exception):
            ids.update(found.env_id for found in self.find({kit.RUN_ID: run_id}))
        with contextlib.suppress(Exception):
            if ids:
                self.aws.call(ec2, "terminate_instances", InstanceIds=sorted(ids))

    def find(self, also: dict[str, str] | None = None) -> list[Leftover]:
        """Every instance of this substrate still alive, with the tags `also` too."""
        wanted = {**kit.selector(self.name), **(also or {})}
        filters = [{"Name": f"tag:{key}", "Values": [value]} for key, value in wanted.items()]
        filters.append({"Name": "instance-state-name", "Values": list(ALIVE)})
        found = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Filters": filters}
            if token:
                kwargs["NextToken"] = token
            answer = self.aws.call(self.aws.ec2, "describe_instances", **kwargs)
            for reservation in answer.get("Reservations") or []:
                for instance in reservation.get("Instances") or []:
                    found.append(
                        kit.leftover(
                            instance["InstanceId"],
                            {t["Key"]: t["Value"] for t in instance.get("Tags") or []},
                            created_at=instance.get("LaunchTime"),
                            detail=f"{self.name}, {instance.get('State', {}).get('Name')}",
                        )
                    )
            token = answer.get("NextToken")
            if not token:
                return found
