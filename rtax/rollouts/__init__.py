"""Running rollouts: one rollout (`rollout`), a batch (`rtax probe`), a burst (`rtax burst`), the
deadline, and the engines that run them (local threads, Ray)."""
