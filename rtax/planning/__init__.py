"""The fleet models: worker-hour projection, step time, the warm-pool model, pricing, and the
study's published figures."""
