"""The Kubernetes API as the substrate calls it: one configuration, one call path.

Why one call path: every request of a rollout (create, get, watch, delete, list) must answer
"slow down" the same way (`kit.RetryPolicy`, its waits recorded on the environment), and must
fail with the error class of the phase it serves, never with the client's own exception. The
client library's silent retries are switched off so that the only retries are these, timed.
The configuration is the one place that holds credentials (`secrets` lists them for
redaction).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from rtax.core.failures import RateLimited, SubstrateError
from rtax.substrates import kit
from rtax.substrates.base import RateLimitWait, clock


def k8s() -> Any:
    """The client library, imported on first use: the registry stays cheap for other kinds."""
    import kubernetes

    return kubernetes


def configuration(
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    host: str | None,
    token: str | None,
    ca_cert: str | None,
    verify_ssl: bool,
) -> Any:
    """The client configuration from a direct URL, the in-cluster account or a kubeconfig."""
    lib = k8s()
    cfg = lib.client.Configuration()
    if host:
        cfg.host = host.rstrip("/")
        if token:
            cfg.api_key = {"BearerToken": token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        cfg.ssl_ca_cert = ca_cert
        cfg.verify_ssl = verify_ssl
    elif in_cluster:
        lib.config.load_incluster_config(client_configuration=cfg)
    else:
        try:
            lib.config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
        except (lib.config.ConfigException, OSError) as exc:
            where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise SubstrateError(
                f"no usable kubeconfig at {where} ({type(exc).__name__}); set kubeconfig, "
                "context, in_cluster or host"
            ) from None
    cfg.retries = 0  # no silent retries inside a measured call: ours are explicit
    return cfg


def secrets(cfg: Any) -> list[str]:
    """The credentials a configuration holds (a bearer token, with or without its prefix; a
    password): what `redacting` keeps out of every error message."""
    values = [str(v) for v in (cfg.api_key or {}).values() if v]
    values += [v.split(" ", 1)[1] for v in values if v.startswith("Bearer ")]
    if cfg.password:
        values.append(str(cfg.password))
    return values


class Expired(Exception):
    """A watch's resourceVersion is older than the server keeps (410 Gone)."""


OnWait = Callable[[RateLimitWait], None] | None


class Api:
    """A `CoreV1Api` in one namespace with the call path every request of the substrate takes."""

    def __init__(self, cfg: Any, namespace: str, api_timeout_s: float, policy: kit.RetryPolicy):
        lib = k8s()
        self.cfg = cfg
        self.core = lib.client.CoreV1Api(lib.client.ApiClient(cfg))
        self.namespace = namespace
        self.api_timeout_s = api_timeout_s
        self.policy = policy

    def call(
        self,
        what: str,
        fn: Callable[[float], Any],
        *,
        fail: type[SubstrateError],
        slow: type[SubstrateError],
        timeout_s: float,
        missing_ok: bool = False,
        raw: bool = False,
        on_wait: OnWait = None,
    ) -> Any:
        """`fn(remaining_s)` within `timeout_s`, HTTP 429 retried by the policy, and every other
        failure classified: refused -> `fail`, no answer in time -> `slow`.

        Returns the parsed JSON body (None on 404 when `missing_ok`), or with `raw` the unread
        response (a watch stream; 410 Gone then raises `Expired`)."""
        lib = k8s()
        start = clock()
        deadline = start + timeout_s

        def attempt() -> Any:
            resp = fn(max(deadline - clock(), 0.5))
            return resp if raw else json.loads(resp.data or b"null")

        try:
            return self.policy.call(
                attempt,
                what=what,
                limited=lambda exc: getattr(exc, "status", None) == 429,
                detail=lambda exc: f"HTTP 429 {status_message(exc)}",
                deadline=min(deadline, start + self.policy.deadline_s),
                on_wait=on_wait,
            )
        except RateLimited as exc:
            raise exc from None  # not the refusal's chain: its headers may echo anything
        except lib.client.ApiException as exc:
            if exc.status == 404 and missing_ok:
                return None
            if exc.status == 410 and raw:
                raise Expired() from None
            if exc.status == 0:
                raise fail(f"{what}: {reason(exc)}") from None
            refused = fail(f"{what}: HTTP {exc.status} {status_message(exc)}")
            refused.http_status = exc.status  # type: ignore[attr-defined]
            raise refused from None
        except Exception as exc:
            lost = unanswered(exc, what, timeout_s, fail=fail, slow=slow)
            if lost is None:
                raise
            raise lost from None

    def plain(self, what: str, fn: Callable[..., Any]) -> Any:
        """`fn(**request_options)` within `api_timeout_s`, any failure a plain `SubstrateError`
        (listing, version: calls outside a rollout's phases)."""
        return self.call(
            what,
            lambda left: fn(_preload_content=False, _request_timeout=self.timeout(left)),
            fail=SubstrateError,
            slow=SubstrateError,
            timeout_s=self.api_timeout_s,
        )

    def get(
        self, name: str, slow: type[SubstrateError], timeout_s: float, on_wait: OnWait = None
    ) -> dict[str, Any] | None:
        """The pod `name`, or None when the API has none."""
        return self.call(
            "pod get",
            lambda left: self.core.read_namespaced_pod(
                name, self.namespace, _preload_content=False, _request_timeout=self.timeout(left)
            ),
            fail=slow,
            slow=slow,
            timeout_s=timeout_s,
            missing_ok=True,
            on_wait=on_wait,
        )

    def timeout(self, seconds: float) -> tuple[float, float]:
        """The client's (connect, read) timeout for a call that may take `seconds`."""
        return (min(seconds, self.api_timeout_s), max(seconds, 0.5))


def status_message(exc: Any) -> str:
    """The Status message of an API error body (never its headers: they may echo anything)."""
    try:
        body = json.loads(exc.body)
        return f"{body.get('reason', '')}: {body.get('message', '')}"[:500]
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason or "")[:200]


def reason(exc: Any) -> str:
    """The first line of an error's reason (the client appends headers and body after it)."""
    return str(getattr(exc, "reason", "") or exc).split(" -+-+- ")[0][:300]


def unanswered(
    exc: BaseException,
    what: str,
    timeout_s: float,
    *,
    fail: type[SubstrateError],
    slow: type[SubstrateError],
) -> SubstrateError | None:
    """The error for a request (or a stream) the API did not answer: `slow` when it gave up
    waiting, `fail` when the API could not be reached; None for any other exception."""
    if is_timeout(exc):
        return slow(f"{what}: no answer within {timeout_s:g} s")
    if is_transport(exc):
        return fail(f"{what}: API unreachable ({transport_reason(exc)})")
    return None


def is_timeout(exc: BaseException) -> bool:
    """Whether urllib3 gave up waiting (a refused connection is not a timeout)."""
    import urllib3

    inner = getattr(exc, "reason", None)
    refused = urllib3.exceptions.NewConnectionError  # (a ConnectTimeoutError, by history)
    if isinstance(exc, refused) or isinstance(inner, refused):
        return False
    return isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)) or isinstance(
        inner, urllib3.exceptions.TimeoutError
    )


def is_transport(exc: BaseException) -> bool:
    """Whether the API could not be reached at all."""
    import urllib3

    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError))


def transport_reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", None) or exc
    return type(inner).__name__
