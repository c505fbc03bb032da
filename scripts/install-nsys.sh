#!/usr/bin/env bash
# Installs Nsight Systems (CLI, importer, recipes) from Debian's non-free
# packages into a project-local prefix, without touching the system's apt
# sources.  Idempotent: a finished install is kept.  Then (each time, also over
# a finished install) puts the project's nsys recipe offload_overlap into it
# with `profile-step install-recipe`, when .venv exists.
#
# Two versions (Debian has no other):
#   2024.2  2024.2.3 from experimental (CUDA 12.5), the default: it opens
#           reports written by nsys 2024.2 (2023.4.4 refuses them).  Like 2023.4.4
#           it loses the NVTX ranges of the nvtx package >= 0.2.12 (0.2.17 tried),
#           so the nvtx pin stays.
#   2023.4  2023.4.4 from trixie (CUDA 12.4): the tests' version matrix (the same
#           numbers, recipe tables and cross-check from each nsys), and the source
#           of the libsqlite3.so.0 that 2024.2.3's recipes need (below).
#
# Usage: scripts/install-nsys.sh [--version 2024.2|2023.4] [PREFIX]
#        (default 2024.2; PREFIX default .tools/nsys-2024.2.3 or .tools/nsys-2023.4.4)
# Prints the path of the nsys binary on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
series=2024.2
if [ "${1:-}" = --version ]; then
  series=${2:?install-nsys: --version needs 2024.2 or 2023.4}
  shift 2
fi
# extra: the packages beside the two nsight-systems ones (2024.2's importer links Arrow and Parquet).
# sqlite_from: 2024.2's recipes need NVIDIA's libsqlite3.so.0 (its SQL functions median,
# rtree_scale, ...), which Debian's 2024.2.3 leaves out ("Use system libsqlite3.so.0") and its
# 2023.4.4 target package ships; only that file is taken from it.
sqlite_ver='2023.4.4.54~12.4.1-2'
case "$series" in
  2024.2) suite=experimental; ver='2024.2.3.38~12.5.0-2+b1'; name=nsys-2024.2.3
          extra=("libarrow500=0~~12.5.0-2+b1" "libparquet500=0~~12.5.0-2+b1"); sqlite_from=trixie ;;
  2023.4) suite=trixie; ver=$sqlite_ver; name=nsys-2023.4.4; extra=(); sqlite_from= ;;
  *) echo "install-nsys: unknown version $series (2024.2 or 2023.4)" >&2; exit 2 ;;
esac
prefix=$(realpath -m "${1:-$here/.tools/$name}")
target="$prefix/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"
host="$prefix/usr/lib/nsight-systems/host-linux-x64"

install_recipe() {
  if [ -n "${INSTALL_NSYS_NO_RECIPE:-}" ]; then
    return 0  # setup.sh installs nsys while pip fills .venv: it installs the recipe afterwards
  elif [ -x "$here/.venv/bin/profile-step" ]; then
    # quiet when it works (set-up runs this every time); its error line and exit code when not
    "$here/.venv/bin/profile-step" install-recipe --nsys "$target/nsys" >/dev/null
  else
    echo "install-nsys: no .venv yet; bash scripts/setup.sh installs the offload_overlap recipe" >&2
  fi
}

# The one-version layout before 2024.2 (.tools/nsys holding 2023.4.4) becomes .tools/nsys-2023.4.4.
legacy="$here/.tools/nsys"
if [ "$series" = 2023.4 ] && [ -z "${1:-}" ] && [ ! -e "$prefix" ] && [ -f "$legacy/.complete" ] \
   && "$legacy/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys" --version 2>/dev/null \
      | grep -q ' 2023\.4\.4'; then
  echo "install-nsys: moving the 2023.4.4 install in .tools/nsys to .tools/$name" >&2
  mv "$legacy" "$prefix"
fi

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

# A private apt configuration: the suite's non-free is read only for this download.
mkdir -p "$work/lists/partial" "$work/debs" "$work/sqlite"
for s in "$suite" $sqlite_from; do
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $s non-free"
done >"$work/sources.list"
apt_opts=(-oDir::Etc::SourceList="$work/sources.list" -oDir::Etc::SourceParts=- \
          -oDir::State::Lists="$work/lists" -oAPT::Architecture=amd64)
# As root, apt drops to its _apt user, which cannot enter the private mktemp folder, and warns
# on every file; the download is the same either way, so download as root without the warning.
[ "$(id -u)" = 0 ] && apt_opts+=(-oAPT::Sandbox::User=root)
echo "install-nsys: downloading nsight-systems $ver from Debian $suite (about 190 MB)" >&2
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$work/debs" && apt-get "${apt_opts[@]}" download \
   "nsight-systems=$ver" "nsight-systems-target=$ver" "${extra[@]}" >/dev/null) || {
  echo "install-nsys: Debian $suite no longer has nsight-systems $ver;" \
       "see: apt-cache policy nsight-systems (with $suite non-free), and update ver= in $0" >&2
  exit 1
}
if [ -n "$sqlite_from" ]; then
  echo "install-nsys: downloading nsight-systems-target $sqlite_ver from Debian $sqlite_from for its libsqlite3.so.0 (40 MB)" >&2
  (cd "$work/sqlite" && apt-get "${apt_opts[@]}" download "nsight-systems-target=$sqlite_ver" >/dev/null)
fi

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
# The libraries nsys's programs load from their own folder (RPATH $ORIGIN) that Debian puts
# elsewhere: 2024.2's QdstrmImporter (without it, a capture writes no report) links Arrow and
# Parquet.
for lib in libarrow.so.500 libparquet.so.500; do
  if [ -e "$prefix/usr/lib/x86_64-linux-gnu/$lib" ]; then ln -sf "../../x86_64-linux-gnu/$lib" "$host/$lib"; fi
done
if [ -n "$sqlite_from" ]; then
  dpkg -x "$work"/sqlite/*.deb "$work/sqlite/x"
  cp "$work/sqlite/x/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/libsqlite3.so.0" "$target/"
fi
# `nsys recipe` insists on this folder, which Debian ships without.
mkdir -p "$target/python/packages/nsys_recipe/third_party"
# `nsys stats` runs its reports in an embedded Python that imports its helper
# modules from host-linux-x64/python/lib; Debian puts them elsewhere.
cp "$target/python/lib/nsysstats.py" "$target/python/lib/gpustats.py" "$host/python/lib/"

echo "install-nsys: installed $("$target/nsys" --version)" >&2
# Check the pieces the project relies on before calling the install complete.
"$target/nsys" export --help >/dev/null
"$host/QdstrmImporter" --version >/dev/null || { echo "install-nsys: $host/QdstrmImporter does not start" >&2; exit 1; }
touch "$prefix/.complete"
install_recipe
echo "$target/nsys"
