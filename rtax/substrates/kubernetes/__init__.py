"""The `kubernetes` substrate: one Pod per rollout, through the official Kubernetes client
(docs/substrates/kubernetes.md).

Why a package: a Pod's life touches four different parts of the API, each with its own
failure modes: the call path and its credentials (`client`), the Pod and its marks (`pod`),
the watches that report orchestration and cleanup (`watch`), and the exec WebSocket that
carries commands (`exec`). `substrate` joins them into the protocol. The client library itself
is imported on first use, so that the registry stays cheap for other kinds.
"""

from rtax.substrates.kubernetes.substrate import KubernetesSubstrate

__all__ = ["KubernetesSubstrate"]
