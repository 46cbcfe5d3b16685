"""Pure functions of samples: statistics, sketches, summaries, change points, incidents, status, the
timeline, load-run figures and the envelope."""
