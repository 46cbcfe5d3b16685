"""What EC2 and SSM say, apart from any state: limits, error codes and error answers.

Why: these are the services' own rules (the EC2 Query API's XML errors, SSM's JSON 1.1 errors,
GetCommandInvocation's output limits, the codes a caller classifies by), and a reader checking
the emulation against AWS should find them in one place. The stateful parts use them: `ssm`
(Run Command) and `server` (the front server, where faults are answered).
"""

from __future__ import annotations

import uuid
from xml.sax.saxutils import escape

#: SSM's limits on what GetCommandInvocation returns.
STDOUT_LIMIT = 24_000
STDERR_LIMIT = 8_000
#: The fake account moto uses; the instance profile every emulated instance gets.
ACCOUNT = "123456789012"
INSTANCE_PROFILE = "rtax-ssm"
#: Status and StatusDetails of an invocation the agent never ran ("Undeliverable" is a
#: StatusDetails value only: GetCommandInvocation's Status has no such value).
UNDELIVERED = ("Failed", "Undeliverable")

#: The operations a fault can be planted on (`rtax.emulation.faults`): the EC2 actions the
#: `ec2` substrate calls and the SSM targets this emulation serves.
OPERATIONS = {
    "RunInstances": "EC2: launch instances",
    "DescribeInstances": "EC2: instance state",
    "TerminateInstances": "EC2: terminate instances",
    "DescribeImages": "EC2: the AMI",
    "SendCommand": "SSM: run a command",
    "GetCommandInvocation": "SSM: a command's outcome",
    "DescribeInstanceInformation": "SSM: agents online",
    "CancelCommand": "SSM: cancel a command",
}
BACKGROUND = {"agent": "a launched instance's SSM agent coming online"}
#: Error code -> (HTTP status, message) as the services answer them, so that a fault can name
#: only the code: capacity and permission (RunInstances), throttling (EC2's
#: RequestLimitExceeded, SSM's ThrottlingException), an invocation not yet visible.
CODES = {
    "InsufficientInstanceCapacity": (
        500,
        "We currently do not have sufficient capacity in the Availability Zone you requested.",
    ),
    "UnauthorizedOperation": (403, "You are not authorized to perform this operation."),
    "RequestLimitExceeded": (503, "Request limit exceeded."),
    "ThrottlingException": (400, "Rate exceeded"),
    "InvocationDoesNotExist": (400, ""),
}


class SsmError(Exception):
    """An SSM error answer (HTTP 400 with ``__type`` = `code`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def ec2_error(code: str, message: str) -> bytes:
    """The body of an EC2 Query API error (what botocore parses the code from)."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
        f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
        f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


def ssm_error(code: str, message: str) -> dict[str, str]:
    """The JSON body of an SSM (JSON 1.1 protocol) error."""
    return {"__type": code, "message": message}
