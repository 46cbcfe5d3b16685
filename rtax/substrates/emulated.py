"""How an adapter learns that it talks to one of rtax's own emulations, whatever it was told.

Why (docs/measurement.md#fidelity): a sample's fidelity must not depend on the configuration being
right. An ``ec2`` or ``daytona`` entry whose endpoint happens to be an emulation, without
``emulate = true``, would otherwise be stored as ``real``. So every emulation
(`rtax.emulation`) stamps every HTTP response with `EMULATION_HEADER`, and every cloud adapter
watches the responses its client library receives: once one carries the header, the adapter's
fidelity is ``emulated`` for good (sticky: a later response can't make it real again). The probe
reads the fidelity when it writes the run row, after the rollout's calls, so the row has it.

One mechanism for every kind; each adapter only chooses where its client library lets it see a
response (`watch_openapi` for the generated clients of Kubernetes and Daytona, `watch_boto3`
for AWS).
"""

from __future__ import annotations

import threading
from typing import Any

#: The response header every rtax emulation sends; its value is the emulated kind.
EMULATION_HEADER = "X-Rtax-Emulation"


def _header(headers: Any, name: str) -> str | None:
    """`name` from a headers mapping (case-insensitive or not), or None."""
    if not headers:
        return None
    try:
        value = headers.get(name) or headers.get(name.lower())
    except AttributeError:  # a list of pairs
        value = next((v for k, v in headers if str(k).lower() == name.lower()), None)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value or None


def _headers_of(response: Any) -> Any:
    """The headers of a response from any of the HTTP layers the client libraries use."""
    for candidate in (response, getattr(response, "urllib3_response", None)):
        headers = getattr(candidate, "headers", None)
        if headers is not None and not callable(headers):
            return headers
    return None


class EmulationWatch:
    """Sticky: remembers the emulated kind from the first response that names one."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self._lock = threading.Lock()

    @property
    def seen(self) -> bool:
        return self.kind is not None

    def fidelity(self, configured: str) -> str:
        """The fidelity a sample must carry: ``emulated`` once an emulation answered."""
        return "emulated" if self.seen else configured

    def observe(self, headers: Any) -> None:
        if self.kind is not None:
            return
        value = _header(headers, EMULATION_HEADER)
        if value:
            with self._lock:
                self.kind = self.kind or value

    def watch_openapi(self, api_client: Any) -> None:
        """Observe every response of an openapi-generator `ApiClient` (the Kubernetes client,
        Daytona's API and toolbox clients): all of them pass through ``rest_client.request``,
        which returns the response or, in the Kubernetes client, raises it as an
        ``ApiException`` carrying its headers."""
        rest = api_client.rest_client
        if getattr(rest, "_rtax_watch", None) is self:
            return
        inner = rest.request

        def request(*args: Any, **kwargs: Any) -> Any:
            try:
                response = inner(*args, **kwargs)
            except Exception as exc:
                self.observe(getattr(exc, "headers", None))
                raise
            self.observe(_headers_of(response))
            return response

        rest.request = request
        rest._rtax_watch = self

    def watch_boto3(self, client: Any) -> None:
        """Observe every response of a boto3 client: botocore emits ``after-call`` for each
        answered call, errors included, with the raw HTTP response."""

        def after_call(http_response: Any = None, **_: Any) -> None:
            self.observe(getattr(http_response, "headers", None))

        client.meta.events.register("after-call", after_call)
