"""The `daytona` substrate: one Daytona sandbox per rollout, through the `daytona` SDK
(docs/substrates/daytona.md).

Why a package: what is Daytona's and not one rollout's (the SDK client shared per endpoint,
`client`) and how each action mode undoes the API's quirks (`actions`) are separate concerns
from the protocol's eight methods (`substrate`). The registry imports `DaytonaSubstrate` from
here; the SDK itself is imported only when a substrate first needs it.
"""

from rtax.substrates.daytona.substrate import MODES, POLL_INTERVAL_S, DaytonaSubstrate

__all__ = ["MODES", "POLL_INTERVAL_S", "DaytonaSubstrate"]
