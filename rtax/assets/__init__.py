"""What every environment gets: the attrs repository and its git server, the pinned workload
toolchain, the runner image, the tools copied in."""
