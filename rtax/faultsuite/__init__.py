"""The fault suite (`make faults`, docs/faults.md): rollouts on every substrate while faults are
injected, counted into one table whose must-be-zero rows prove that nothing leaks, nothing is
lost and nothing leaks out.

Where each part lives: `scenario` (sizes, the generated configuration, the planted secrets, when
each fault fires), `engine` (the private dockerd it may restart), `disk` (the small disk under
the database), `inject` (the faults), `watch` (logs, dashboard readers, environments searched),
`suite` (one run) and `tally` (the figures, pure).
"""
