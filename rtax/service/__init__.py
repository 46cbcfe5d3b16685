"""`rtax schedule`: the `Scheduler`, its budgets, lock and stopping, the detection pass, alerts, the
Prometheus exporter and the health check."""
