"""The ec2 substrate's way to AWS: two boto3 clients, their credentials, and one call.

Why apart: every EC2 and SSM request goes through `Aws.call`, so what must hold for all of them
is written once. botocore's own retry layer is off and "slow down" answers are retried by the
kit's `RetryPolicy` instead, so that persistent throttling is classified (``rate_limited``) and
every wait lands in the sample that paid it. Both clients are watched for an emulation's answer
(`rtax.substrates.emulated`). With ``fidelity="emulated"`` fixed fake keys are sent and the
environment's are never read, so a real key can't reach an emulation; `secrets` is what
`redacting` keeps out of every message that leaves the substrate.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from rtax.core import redaction
from rtax.substrates import kit
from rtax.substrates.base import RateLimitWait
from rtax.substrates.emulated import EmulationWatch

#: Error codes that mean "slow down" across EC2 (Query) and SSM (JSON) and S3-style answers.
THROTTLE_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
        "ProvisionedThroughputExceededException",
    }
)
THROTTLE_STATUS = frozenset({429, 503})
#: Fake keys for emulations only: obviously not secrets, never read from the environment.
EMULATION_KEY_ID = "rtax-emulated-key-id"
EMULATION_KEY = "rtax-emulated-not-a-secret"
NO_CREDENTIALS = (
    "no AWS credentials found: set the environment (AWS_ACCESS_KEY_ID/AWS_PROFILE), "
    "the ec2 substrate's `profile` parameter, or run on an instance with a role"
)


def botocore_errors() -> Any:
    import botocore.exceptions  # imported on first use: the registry stays cheap

    return botocore.exceptions


def transport_errors() -> tuple[type[BaseException], ...]:
    """The API did not answer (connection refused, reset, timed out)."""
    errors = botocore_errors()
    return (errors.ConnectionError, errors.HTTPClientError)


def api_errors() -> tuple[type[BaseException], ...]:
    """The API answered with an error, or did not answer."""
    return (botocore_errors().ClientError, *transport_errors())


def code(exc: Any) -> str:
    """The AWS error code of an answer ("" for an exception without one)."""
    return str(((getattr(exc, "response", None) or {}).get("Error") or {}).get("Code") or "")


def status(exc: Any) -> int | None:
    meta = (getattr(exc, "response", None) or {}).get("ResponseMetadata") or {}
    return meta.get("HTTPStatusCode")


def is_throttle(exc: BaseException) -> bool:
    """A "slow down" answer: a throttling error code or an HTTP 429/503."""
    return code(exc) in THROTTLE_CODES or status(exc) in THROTTLE_STATUS


def message(exc: Any) -> str:
    """One line naming the AWS error (code, status, message); never carries a credential."""
    error = (getattr(exc, "response", None) or {}).get("Error") or {}
    if error.get("Code"):
        return f"{error['Code']} (HTTP {status(exc)}): {error.get('Message') or ''}".strip()
    return f"{type(exc).__name__}: {exc}"


class Aws:
    """The EC2 and SSM clients of one substrate, and the one way to call them."""

    def __init__(
        self,
        *,
        fidelity: str,
        region: str,
        profile: str | None,
        endpoint: str | None,
        api_timeout_s: float,
        rate_limit: kit.RetryPolicy,
    ) -> None:
        import boto3
        from botocore.config import Config

        config = Config(
            region_name=region,
            # botocore's retry layer off: throttling is retried and classified by `call`
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=api_timeout_s,
            read_timeout=api_timeout_s,
            user_agent_extra="rtax",
        )
        if fidelity == "emulated":
            session = boto3.session.Session(
                aws_access_key_id=EMULATION_KEY_ID,
                aws_secret_access_key=EMULATION_KEY,
                region_name=region,
            )
        else:
            session = boto3.session.Session(profile_name=profile, region_name=region)
        self._session = session
        self._registered = False
        self.rate_limit = rate_limit
        #: an rtax emulation's answer makes the samples `emulated`, whatever was configured
        self.emulation = EmulationWatch()
        self.ec2 = session.client("ec2", endpoint_url=endpoint, config=config)
        self.ssm = session.client("ssm", endpoint_url=endpoint, config=config)
        self.emulation.watch_boto3(self.ec2)
        self.emulation.watch_boto3(self.ssm)

    def call(
        self,
        client: Any,
        operation: str,
        *,
        waits: list[RateLimitWait] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """`client.operation(**kwargs)`, retried while throttled (`RateLimited` once it
        persists); each wait is appended to `waits` (an environment's `rate_limit_waits`)."""
        method: Callable[..., dict[str, Any]] = getattr(client, operation)
        if not self._registered:  # the chain resolves on the first call, cached after it
            self._registered = True
            redaction.register(*self.secrets())
        return self.rate_limit.call(
            lambda: method(**kwargs),
            what=client.meta.method_to_api_mapping.get(operation, operation),
            limited=is_throttle,
            detail=message,
            on_wait=None if waits is None else waits.append,
        )

    def secrets(self) -> list[str]:
        """The session's secret key and session token (AWS never echoes them, but nothing here
        relies on it)."""
        try:
            creds = self._session.get_credentials()
        except Exception:  # no credentials: nothing to keep out
            return []
        if creds is None:
            return []
        frozen = creds.get_frozen_credentials()
        return [s for s in (frozen.secret_key, frozen.token) if s]

    def describe(self) -> dict[str, Any]:
        return {
            "endpoint": self.ec2.meta.endpoint_url,
            "ssm_endpoint": self.ssm.meta.endpoint_url,
            "rate_limit": self.rate_limit.describe(),
            "client": {
                "boto3": metadata.version("boto3"),
                "botocore": metadata.version("botocore"),
            },
        }

    def close(self) -> None:
        """Close both clients' connection pools."""
        self.ec2.close()
        self.ssm.close()
