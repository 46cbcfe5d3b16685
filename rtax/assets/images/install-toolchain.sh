#!/bin/sh
# Install the workload toolchain: a venv of PYTHON at DEST holding exactly the pinned wheels.
#
# The same script builds the runner image's /opt/toolchain and the local floor's toolchain
# (README.md#the-workload-toolchain), so both are made the same way from the same files: a venv
# without pip (pip is not a workload program), each wheel unpacked by pypa's `installer` run from
# its own wheel, byte-code compiled at install time on both sides. rtax verified every wheel's
# sha256 against rtax/assets/toolchain.txt before handing the folder over.
#
# usage: install-toolchain.sh PYTHON DEST WHEEL_DIR INSTALLER_WHEEL
set -eu
python=$1 dest=$2 wheels=$3 installer=$4
"$python" -m venv --without-pip "$dest"
for wheel in "$wheels"/*.whl; do
    PYTHONPATH="$installer" "$dest/bin/python" -m installer "$wheel"
done
