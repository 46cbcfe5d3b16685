"""EC2 + SSM on loopback: moto's EC2 state machine, rtax's SSM Run Command, real containers.

Why this shape (docs/emulations.md): the `ec2` substrate must be exercised through the real
`boto3` clients over real HTTP, and its T2 workload needs commands that really run (a clone, a
failing test, a patch, a passing test). moto's server models EC2 well but its SSM does not run
commands. So one front server on 127.0.0.1 is the ``endpoint_url`` of both clients, and:

- **EC2** (the Query protocol, ``Action=...`` forms) and anything else it does not handle are
  forwarded unmodified to a real `moto` server on another loopback port: instance state, tags,
  attributes and filters are moto's. moto has no boot time: an instance is ``running`` as soon as
  RunInstances returns, so the emulated orchestration phase is one API round trip.
- **SSM** (JSON 1.1, ``X-Amz-Target: AmazonSSM.*``): ``SendCommand``, ``GetCommandInvocation``,
  ``DescribeInstanceInformation`` and ``CancelCommand`` are rtax's own: ``AWS-RunShellScript``
  commands run in the container that backs the instance, with SSM's states, ``ResponseCode``,
  stdout and stderr apart and cut to SSM's limits (24,000 and 8,000 characters), the agent's
  ``failed to run commands: exit status N`` line on stderr of a failed command, and
  ``executionTimeout`` enforced by killing the command.
- **Backing containers**: every instance that RunInstances launches gets a container of the
  runner image, created in the background; its "SSM agent" is online only once the container
  runs, so the emulated ready phase is the container's start. TerminateInstances removes it.
- **Faults** are planted in ``faults``, the vocabulary every emulation shares
  (`rtax.emulation.faults`, which lists this one's operations): any EC2 action or SSM target
  answered with the service's error (``fail("RunInstances", code="UnauthorizedOperation")``,
  throttling with ``RequestLimitExceeded`` or ``ThrottlingException``, invocations not yet
  visible with ``InvocationDoesNotExist``), N times or always, or late; and the ``agent`` of
  the next instances never online (or online late).

moto keeps its state per process, so one Ec2Emulation at a time per process; `start` resets it.
Samples taken through this are fidelity ``emulated``: the API is local, the commands run in this
host's Docker engine, and no figure says anything about EC2's own latency.

Where each part lives: `api` (the services' rules: limits, error codes and answers, the
operations), `moto` (the EC2 object store), `instances` (the backing containers and their
agents), `ssm` (Run Command) and `server` (`Ec2Emulation`: the front server, where faults are
matched, start and stop).
"""

from rtax.emulation.ec2.api import (
    ACCOUNT,
    BACKGROUND,
    CODES,
    INSTANCE_PROFILE,
    OPERATIONS,
    STDERR_LIMIT,
    STDOUT_LIMIT,
)
from rtax.emulation.ec2.server import Ec2Emulation

__all__ = [
    "ACCOUNT",
    "BACKGROUND",
    "CODES",
    "INSTANCE_PROFILE",
    "OPERATIONS",
    "STDERR_LIMIT",
    "STDOUT_LIMIT",
    "Ec2Emulation",
]
