"""How the Kubernetes API server judges and answers a request, apart from any state.

Why: these are the API server's own rules (k8s.io/apimachinery and the pod strategy), and a
newcomer checking the emulation against a real cluster should find them in one place, as pure
functions: the v1 ``Status`` body of every error, metav1.Time, pod validation (422 ``Invalid``),
``labelSelector``/``fieldSelector`` matching, boolean query parameters, a deletion's grace period
and a pod's QoS class. The stateful parts use them: `etcd` (watch errors), `server` (routes) and
`kubelet` (timestamps).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def timestamp() -> str:
    """A metav1.Time: RFC 3339 in UTC, whole seconds (what the API server serialises)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- validation and selectors (as the API server does them) ---------------------------------------


def _label_key_errors(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    errors = []
    if prefix and (len(prefix) > 253 or not _NAME_RE.match(prefix)):
        errors.append(f"prefix part {prefix!r} must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not _LABEL_NAME_RE.match(name):
        errors.append(
            f"name part {name!r} must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (at most 63)"
        )
    return errors


def _label_value_errors(value: Any) -> list[str]:
    if not isinstance(value, str):
        return ["must be a string"]
    if value and (len(value) > 63 or not _LABEL_NAME_RE.match(value)):
        return [
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character (at most 63)"
        ]
    return []


def validate_pod(pod: dict[str, Any]) -> list[dict[str, str]]:
    """Field errors of a pod as the API server reports them (an empty list: valid)."""
    causes: list[dict[str, str]] = []

    def bad(field: str, value: Any, why: str) -> None:
        message = f"Invalid value: {json.dumps(value)}: {why}"
        causes.append({"reason": "FieldValueInvalid", "message": message, "field": field})

    meta = pod.get("metadata") or {}
    name = meta.get("name") or ""
    if not name:
        causes.append(
            {"reason": "FieldValueRequired", "message": "Required value", "field": "metadata.name"}
        )
    elif len(name) > 253 or not _NAME_RE.match(name):
        bad(
            "metadata.name",
            name,
            "a lowercase RFC 1123 subdomain must consist of lower case "
            "alphanumeric characters, '-' or '.'",
        )
    for key, value in (meta.get("labels") or {}).items():
        for why in _label_key_errors(key):
            bad("metadata.labels", key, why)
        for why in _label_value_errors(value):
            bad("metadata.labels", value, why)
    for key in meta.get("annotations") or {}:
        for why in _label_key_errors(key):
            bad("metadata.annotations", key, why)
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        causes.append(
            {
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": "spec.containers",
            }
        )
    for i, c in enumerate(containers):
        for field in ("name", "image"):
            if not c.get(field):
                causes.append(
                    {
                        "reason": "FieldValueRequired",
                        "message": "Required value",
                        "field": f"spec.containers[{i}].{field}",
                    }
                )
    return causes


def _split_terms(selector: str) -> list[str]:
    """Split a selector on the commas that are not inside parentheses."""
    terms, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur.strip())
    return terms


_SET_TERM = re.compile(r"^(\S+)\s+(in|notin)\s+\(([^)]*)\)$")


def label_matcher(selector: str | None) -> Callable[[dict[str, str]], bool]:
    """A predicate over labels for a labelSelector (=, ==, !=, in, notin, exists, !exists).

    Raises ValueError on a malformed selector (the API server answers 400)."""
    checks: list[Callable[[dict[str, str]], bool]] = []
    for term in _split_terms(selector or ""):
        if m := _SET_TERM.match(term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                checks.append(lambda lb, k=key, vs=values: lb.get(k) in vs)
            else:
                checks.append(lambda lb, k=key, vs=values: lb.get(k) not in vs)
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            checks.append(lambda lb, k=key, v=value: lb.get(k) != v)
        elif "=" in term:
            key, value = (s.strip() for s in re.split("==?", term, maxsplit=1))
            checks.append(lambda lb, k=key, v=value: lb.get(k) == v)
        elif term.startswith("!"):
            absent = term[1:].strip()
            checks.append(lambda lb, k=absent: k not in lb)
        else:
            checks.append(lambda lb, k=term: k in lb)
        key = re.split(r"[\s=!]", term.lstrip("!"), maxsplit=1)[0]
        if _label_key_errors(key):
            raise ValueError(f"unable to parse requirement: invalid label key {key!r}")
    return lambda labels: all(check(labels) for check in checks)


def field_matcher(selector: str | None) -> Callable[[dict[str, Any]], bool]:
    """A predicate over an object for a fieldSelector of dotted paths (=, ==, !=)."""
    checks = []
    for term in _split_terms(selector or ""):
        negate = "!=" in term
        path, value = (s.strip() for s in re.split("!=|==?", term, maxsplit=1))
        if not path or "=" not in term:
            raise ValueError(f"invalid field selector term {term!r}")
        checks.append((path.split("."), value, negate))

    def match(obj: dict[str, Any]) -> bool:
        for parts, value, negate in checks:
            cur: Any = obj
            for part in parts:
                cur = cur.get(part) if isinstance(cur, dict) else None
            if (str(cur if cur is not None else "") == value) == negate:
                return False
        return True

    return match


# -- answers and request parameters ---------------------------------------------------------------


def status_body(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """A v1 Status, the body of every API error."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def grace_period(query: Any, body: bytes, pod: dict[str, Any]) -> int:
    """A deletion's grace period as the API server picks it: DeleteOptions in the body, then
    the ``gracePeriodSeconds`` query parameter, then the pod's terminationGracePeriodSeconds
    (default 30)."""
    options = json.loads(body) if body.strip() else {}
    value = (options or {}).get("gracePeriodSeconds")
    if value is None:
        value = query.get("gracePeriodSeconds")
    if value is None:
        value = pod["spec"].get("terminationGracePeriodSeconds", 30)
    grace = int(value)
    if grace < 0:
        raise ValueError("gracePeriodSeconds must be >= 0")
    return grace


def is_true(value: str | None) -> bool:
    """A boolean query parameter as Go's strconv.ParseBool reads it (the client sends "True")."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def qos_class(spec: dict[str, Any]) -> str:
    res = [(c.get("resources") or {}) for c in spec.get("containers") or []]
    if not any(r.get("requests") or r.get("limits") for r in res):
        return "BestEffort"
    guaranteed = all(
        r.get("limits")
        and {k: r["limits"].get(k) for k in ("cpu", "memory")}
        == {k: (r.get("requests") or r["limits"]).get(k) for k in ("cpu", "memory")}
        for r in res
    )
    return "Guaranteed" if guaranteed else "Burstable"
