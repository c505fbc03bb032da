#!/usr/bin/env bash
# On a lent GPU machine (see scripts/make_device_kit.sh): unpack the carried nsys and nvtx wheel,
# then scripts/device_capture.py profiles examples/train.py per policy with profile-step inside a
# time budget and packs each run into $OUT (at most 8 files of 16 MiB come back).
#   bash scripts/device_capture.sh [--tiny] [--budget SECONDS]   (--tiny: CPU-sized, to try it anywhere)
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder whose files come back}"
if [ -f .device/nsys.tar.xz ] && ! command -v nsys >/dev/null; then
  mkdir -p /opt/nsys && tar -xJf .device/nsys.tar.xz -C /opt/nsys && export PATH=/opt/nsys/target-linux-x64:$PATH
fi
py=${PYTHON:-python3}
if [ -d .device/wheels ] && ! "$py" -c 'import nvtx' 2>/dev/null; then
  "$py" -m pip install --quiet --no-index --find-links .device/wheels nvtx || echo "nvtx wheel did not install"
fi
PYTHON=$py exec "$py" scripts/device_capture.py "$@"
