#!/usr/bin/env bash
# Installs Nsight Systems 2023.4.4 (CLI, importer, recipes) from Debian's
# non-free packages into a project-local prefix, without touching the
# system's apt sources.  Idempotent: a finished install is kept.  Then (each
# time, also over a finished install) puts the project's nsys recipe
# offload_overlap into it with `profile-step install-recipe`, when .venv exists.
#
# Usage: scripts/install-nsys.sh [PREFIX]     (default: .tools/nsys)
# Prints the path of the nsys binary on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(realpath -m "${1:-$here/.tools/nsys}")
ver='2023.4.4.54~12.4.1-2'
target="$prefix/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"
host="$prefix/usr/lib/nsight-systems/host-linux-x64"

install_recipe() {
  if [ -x "$here/.venv/bin/profile-step" ]; then
    # quiet when it works (set-up runs this every time); its error line and exit code when not
    "$here/.venv/bin/profile-step" install-recipe --nsys "$target/nsys" >/dev/null
  else
    echo "install-nsys: no .venv yet; bash scripts/setup.sh installs the offload_overlap recipe" >&2
  fi
}

if [ -f "$prefix/.complete" ] && [ -x "$target/nsys" ]; then
  install_recipe
  echo "$target/nsys"
  exit 0
fi

[ "$(uname -m)" = x86_64 ] || { echo "install-nsys: only x86_64 is supported (this is $(uname -m))" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mirror=$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | head -n1 || true)
[ -n "$mirror" ] || mirror=$(grep -h -m1 -E '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -n1 || true)
[ -n "$mirror" ] || { echo "install-nsys: no Debian mirror found in this machine's apt sources" >&2; exit 1; }

# A private apt configuration: trixie non-free is read only for this download.
mkdir -p "$work/lists/partial" "$work/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie non-free" >"$work/sources.list"
apt_opts=(-oDir::Etc::SourceList="$work/sources.list" -oDir::Etc::SourceParts=- \
          -oDir::State::Lists="$work/lists" -oAPT::Architecture=amd64)
# As root, apt drops to its _apt user, which cannot enter the private mktemp folder, and warns
# on every file; the download is the same either way, so download as root without the warning.
[ "$(id -u)" = 0 ] && apt_opts+=(-oAPT::Sandbox::User=root)
echo "install-nsys: downloading nsight-systems $ver (about 190 MB)" >&2
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$work/debs" && apt-get "${apt_opts[@]}" download \
   "nsight-systems=$ver" "nsight-systems-target=$ver" >/dev/null)

# The importer needs libssh.so (Debian's libssh-4, linked under that name).
if [ ! -e /usr/lib/x86_64-linux-gnu/libssh.so.4 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "install-nsys: installing libssh-4 with apt-get" >&2
    apt-get install -y -q libssh-4 >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q libssh-4 >/dev/null; }
  else
    echo "install-nsys: libssh-4 is missing; run: sudo apt-get install libssh-4" >&2; exit 1
  fi
fi

rm -rf "$prefix.partial"
mkdir -p "$prefix.partial"
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$prefix.partial"; done
rm -rf "$prefix"
mv "$prefix.partial" "$prefix"

# nsys looks for the importer in a sibling host-linux-x64/ (relative link: the
# prefix may move).
ln -sfn ../../nsight-systems/host-linux-x64 "$(dirname "$target")/host-linux-x64"
ln -sf /usr/lib/x86_64-linux-gnu/libssh.so.4 "$host/libssh.so"
# `nsys recipe` insists on this folder, which Debian ships without.
mkdir -p "$target/python/packages/nsys_recipe/third_party"
# `nsys stats` runs its reports in an embedded Python that imports its helper
# modules from host-linux-x64/python/lib; Debian puts them elsewhere.
cp "$target/python/lib/nsysstats.py" "$target/python/lib/gpustats.py" "$host/python/lib/"

echo "install-nsys: installed $("$target/nsys" --version)" >&2
# Check the pieces the project relies on before calling the install complete.
"$target/nsys" export --help >/dev/null
touch "$prefix/.complete"
install_recipe
echo "$target/nsys"
