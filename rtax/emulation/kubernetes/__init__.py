"""A Kubernetes API server on loopback whose pods are real Docker containers.

Why (docs/emulations.md): the `kubernetes` substrate must be exercised through the official
client over the real protocol, and its commands must really run. This server speaks the parts of
the core/v1 API that a rollout uses, as the real API server and kubelet answer them:

- pods: create (name and label validation, 422 ``Invalid`` like the API server; 409 on a taken
  name; 404 in an unknown namespace), get, list with ``labelSelector``/``fieldSelector``, and
  delete with the API server's grace period rules (``DeleteOptions`` body, else the
  ``gracePeriodSeconds`` parameter, else the pod's ``terminationGracePeriodSeconds``, else 30):
  with grace period 0, or for a pod no node has yet, the object is removed at once (the answer
  and the ``DELETED`` event carry the ``deletionTimestamp``; a GET then answers 404) and the
  kubelet removes the container in the background afterwards, so the time of a delete is the
  API's, as on a real cluster; with a grace period the pod is terminating (``deletionTimestamp``
  set) and goes (``DELETED``) once its container is removed (the grace period is not waited
  out: the container is killed at once);
- watch: ``watch=true`` streams one JSON event per line over a chunked response, from a
  ``resourceVersion`` (events after it, from a bounded history; ``410 Gone`` once it is older
  than the history) or, without one, synthetic ``ADDED`` events for the current state first;
  ``timeoutSeconds`` ends the stream;
- a kubelet: each pod goes Pending -> (scheduled, image checked, container created, started)
  -> Running, with the conditions PodScheduled, Initialized, ContainersReady and Ready and their
  transition times, container statuses, and the events Scheduled, Pulled, Created, Started
  (listable and watchable in the events API). An image that is not on the Docker engine is never
  pulled: the container waits with ``ErrImagePull`` then ``ImagePullBackOff``, as a kubelet
  reports a missing image;
- exec over WebSocket, subprotocols ``v5.channel.k8s.io`` and ``v4.channel.k8s.io`` (the first
  one the client offers wins, as in the API server): stdout on channel 1, stderr on channel 2,
  and on channel 3 the v1 ``Status`` (``Success``, or ``NonZeroExitCode`` with the exit code as
  the cause message, which is where the client reads it).

Not modelled: other resources, stdin/tty and resize in exec, the old ``channel.k8s.io``
protocol, scheduling constraints (nodeSelector and runtimeClassName are stored, never enforced),
restarts, image pulls, admission, and output streaming (an exec's output is sent when the command
ends). Every pod runs in a container of `rtax.substrates.docker.substrate.DockerSubstrate` named
``kubernetes-emulation``, so commands really run and the reaper can find orphans.

Faults are planted in ``faults``, the vocabulary every emulation shares (`rtax.emulation.faults`,
which lists this one's operations): an operation answered with an HTTP error (e.g. 429 with
``Retry-After``, 403, 422, 500, in the v1 ``Status``), answered late after doing the work (a lost
answer; for ``exec`` the upgrade request is accepted on its TCP connection and never answered,
then dropped after the delay), or a failed ``schedule`` that leaves new pods Pending and
unscheduled until cleared (an orchestration that never ends). `stop()` waits for the kubelet's
background work and removes every container the emulation made, including those whose pods
were deleted and are still being removed.

Where each part lives: `api` (the API server's rules: errors, validation, selectors), `etcd`
(objects, resourceVersion, watch), `kubelet` (each pod's life on Docker), `exec` (the WebSocket
exec channel) and `server` (`KubernetesEmulation`: routes, where faults are matched, start
and stop).
"""

from rtax.emulation.kubernetes.api import field_matcher, label_matcher, status_body
from rtax.emulation.kubernetes.etcd import HISTORY
from rtax.emulation.kubernetes.kubelet import BACKING_NAME, NODE_NAME
from rtax.emulation.kubernetes.server import BACKGROUND, OPERATIONS, KubernetesEmulation

__all__ = [
    "BACKGROUND",
    "BACKING_NAME",
    "HISTORY",
    "NODE_NAME",
    "OPERATIONS",
    "KubernetesEmulation",
    "field_matcher",
    "label_matcher",
    "status_body",
]
