"""The shared vocabulary every other package speaks: the record schema, the series, the failure
classes, workloads, redaction, paths, the kinds by name, the validators; pure, importing no other
rtax package."""
