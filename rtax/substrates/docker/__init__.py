"""The docker kind: containers on a Docker engine (runc or gVisor), in exec or session mode."""

from rtax.substrates.docker.substrate import DockerSubstrate

__all__ = ["DockerSubstrate"]
