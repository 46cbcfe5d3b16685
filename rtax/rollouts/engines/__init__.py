"""Where a rollout runs once it is chosen: this process's threads (`local`) or a Ray cluster (`ray`), behind one `Engine` protocol."""
