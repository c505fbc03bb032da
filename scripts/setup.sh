#!/usr/bin/env bash
# Everything profile-step needs on a fresh Debian/Ubuntu machine, idempotent:
#   - a virtual environment .venv with the package, JAX (CPU or whatever pip
#     gives), the nvtx binding and the test tools;
#   - Nsight Systems 2024.2.3, the default, in .tools/nsys-2024.2.3, and 2023.4.4 in
#     .tools/nsys-2023.4.4 for the tests' version matrix (scripts/install-nsys.sh);
#   - with --browser: Debian's chromium + chromium-driver for the dashboard tests;
#   - with --aot: a separate .venv-aot with JAX's CUDA plugin (jax[cuda12], the same JAX
#     version as .venv, about 5.5 GB) for `profile-step plan`: compiling the step for a GPU
#     target on a machine without a GPU.  Kept apart so that .venv stays CPU-only and quiet.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
browser=0
aot=0
for arg in "$@"; do
  case "$arg" in
    --browser) browser=1 ;;
    --aot) aot=1 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

# apt (chromium, libssh-4 for nsys) then the two nsys downloads run in one background lane while pip
# fills the environments: they share nothing, and on a fresh machine this saves minutes
pkgs=()
if [ "$browser" = 1 ] && ! { command -v chromium >/dev/null && command -v chromedriver >/dev/null; }; then
  pkgs+=(chromium chromium-driver)
fi
[ -e /usr/lib/x86_64-linux-gnu/libssh.so.4 ] || pkgs+=(libssh-4)
if [ "${#pkgs[@]}" -gt 0 ] && [ "$(id -u)" != 0 ]; then
  echo "setup: ${pkgs[*]} missing; run: sudo apt-get install ${pkgs[*]}" >&2
  exit 1
fi
lane_log=$(mktemp)
(
  set -e
  if [ "${#pkgs[@]}" -gt 0 ]; then
    echo "setup: installing Debian's ${pkgs[*]}" >&2
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null
  fi
  # 2023.4 first: it moves an earlier set-up's .tools/nsys (2023.4.4) to .tools/nsys-2023.4.4
  INSTALL_NSYS_NO_RECIPE=1 bash scripts/install-nsys.sh --version 2023.4 >/dev/null
  INSTALL_NSYS_NO_RECIPE=1 bash scripts/install-nsys.sh --version 2024.2 >/dev/null
) >"$lane_log" 2>&1 &
lane=$!
trap 'kill "$lane" 2>/dev/null || true; rm -f "$lane_log"' EXIT

py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($py --version)" >&2
  "$py" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python packages (jax, polars, dash, nvtx, pytest, ...)" >&2
  .venv/bin/python -m pip install -qq --disable-pip-version-check -U pip
  # the package was called offload-profiler before it took its command's name: an older set-up's copy goes
  .venv/bin/python -m pip uninstall -qq -y offload-profiler 2>/dev/null || true
  .venv/bin/python -m pip install -qq --disable-pip-version-check -e '.[capture,recipes,test]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# the dashboard's lighter plotly.js (dashboards/plotly_bundle.py); without it the full one is served
.venv/bin/python scripts/fetch_plotly_bundle.py || true

if [ "$aot" = 1 ]; then
  jax_version=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("jax"))')
  if [ ! -f ".venv-aot/.installed-jax-$jax_version" ]; then
    echo "setup: installing jax[cuda12]==$jax_version into .venv-aot (about 5.5 GB)" >&2
    [ -x .venv-aot/bin/python ] || "$py" -m venv .venv-aot
    .venv-aot/bin/python -m pip install -qq --disable-pip-version-check "jax[cuda12]==$jax_version"
    rm -f .venv-aot/.installed-jax-*
    touch ".venv-aot/.installed-jax-$jax_version"
  fi
fi

if ! wait "$lane"; then
  echo "setup: installing nsys or Debian's packages failed:" >&2
  cat "$lane_log" >&2
  exit 1
fi
cat "$lane_log" >&2
# now that .venv exists: the offload_overlap recipe into each nsys (a finished install is kept)
nsys_old=$(bash scripts/install-nsys.sh --version 2023.4 | tail -n1)
nsys=$(bash scripts/install-nsys.sh --version 2024.2 | tail -n1)
echo "setup: nsys 2024.2.3 (the default) at $nsys" >&2
echo "setup: nsys 2023.4.4 at $nsys_old" >&2
