#!/usr/bin/env bash
# Here (with the package registries): everything a lent GPU machine (no network,
# Python 3.12, jax preinstalled, no nsys) needs to run scripts/device_capture.sh:
#   .device/nsys.tar.xz   a small Nsight Systems 2023.4.4 (../shared/device/make-nsys-bundle.sh)
#   .device/wheels/       the nvtx binding for Python 3.12 (below 0.2.12: see FIELD_NOTES)
# Then: run(command="bash scripts/device_capture.sh", carry=[".device"]).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device/wheels
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo /.device/ >> .git/info/exclude
[ -f .device/nsys.tar.xz ] || bash ../shared/device/make-nsys-bundle.sh .device/nsys.tar.xz
py=${PYTHON:-.venv/bin/python}
"$py" -m pip download --quiet --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --no-deps -d .device/wheels "nvtx==0.2.11"
ls -l .device .device/wheels
