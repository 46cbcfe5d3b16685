"""The `ec2` kind (docs/substrates/ec2.md): one EC2 instance per rollout, commands through SSM.

Why a package: the AWS clients and their one retrying call (`api`), the instances' life on EC2
(`instances`), the commands on SSM (`ssm`) and the protocol's steps (`substrate`) each change
for their own reasons; the registry and the tests import from here.
"""

from rtax.substrates.ec2.api import EMULATION_KEY, EMULATION_KEY_ID, is_throttle
from rtax.substrates.ec2.substrate import Ec2Substrate

__all__ = ["EMULATION_KEY", "EMULATION_KEY_ID", "Ec2Substrate", "is_throttle"]
