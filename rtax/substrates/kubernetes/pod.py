"""The Pod a rollout asks for, and the Pod the reaper finds again.

Why here and apart: the kit's marks (`kit.labels`) must survive the API server's rules. Label
values are short DNS-ish tokens, so the pod carries the kit's selector and the run id as
tokens in its labels (what `rtax reap` selects by) and every mark exactly, creation time and
"host/pid-namespace:pid" included, in its annotations; a leftover is read back from both, the exact
annotation first.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from rtax.substrates import kit
from rtax.substrates.base import LABEL, Leftover

#: The one container of every pod.
CONTAINER = "main"
#: The marks that are also labels: what selecting and reaping need.
LABELLED = (LABEL, kit.RUN_ID, kit.SUBSTRATE)
#: Waiting reasons after which a container will not start without a change of spec.
FATAL_WAITING = {
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
}


def dns_token(text: str, limit: int = 63) -> str:
    """`text` as a DNS label / label value: lowercase alphanumerics and '-', at most `limit`."""
    token = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return token or "x"


def pod_name(run_id: str) -> str:
    return dns_token(f"rtax-{run_id}")


def label_selector(substrate: str) -> str:
    """`kit.selector` as a labelSelector over the pods' labels."""
    return ",".join(f"{key}={dns_token(value)}" for key, value in kit.selector(substrate).items())


@dataclass(frozen=True)
class PodSpec:
    """What every pod of one substrate is made of (provenance as it is)."""

    image: str
    image_pull_policy: str
    cpu: str | None
    memory: str | None
    runtime_class_name: str | None
    node_selector: dict[str, str] = field(default_factory=dict)
    working_dir: str = "/work"

    def manifest(
        self, name: str, run_id: str, substrate: str, lifetime_s: float | None = None
    ) -> dict[str, Any]:
        """The Pod for one rollout: sleeping until commands come, deleted with no grace."""
        resources = {
            key: value for key, value in (("cpu", self.cpu), ("memory", self.memory)) if value
        }
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": CONTAINER,
                    "image": self.image,
                    "imagePullPolicy": self.image_pull_policy,
                    "command": ["sleep", "infinity"],
                    "workingDir": self.working_dir,
                    "env": [{"name": k, "value": v} for k, v in kit.COMMAND_ENV.items()],
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
        }
        if self.runtime_class_name:
            spec["runtimeClassName"] = self.runtime_class_name
        if self.node_selector:
            spec["nodeSelector"] = self.node_selector
        marks = kit.labels(run_id, substrate, lifetime_s)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {key: dns_token(marks[key]) for key in LABELLED},
                "annotations": {key: value for key, value in marks.items() if key != LABEL},
            },
            "spec": spec,
        }

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def leftover(pod: dict[str, Any], namespace: str) -> Leftover:
    """A listed pod as a `Leftover`: its marks from annotations over labels."""
    meta = pod["metadata"]
    marks = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
    return kit.leftover(
        meta["name"],
        marks,
        created_at=meta.get("creationTimestamp"),
        detail=f"{namespace}, {(pod.get('status') or {}).get('phase')}",
    )


def pending_reason(pod: dict[str, Any]) -> str:
    """Why a pod is not running yet, in the kubelet's or the scheduler's words."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"{waiting['reason']} {waiting.get('message', '')}".strip()
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True" and cond.get("message"):
            return f"{cond['type']}: {cond['message']}"
    return f"phase {status.get('phase')}"
