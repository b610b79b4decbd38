#!/usr/bin/env bash
# Prepares, on a Debian machine with network access, the build dependencies a bare GPU host lacks (its image has
# CUDA, CMake, ninja, Nsight Compute and compute-sanitizer, but none of these and no way to install them): the
# Debian packages are fetched with `apt-get download` and unpacked with `dpkg -x` into a git-ignored folder
# (default gpu-bundle/, about 13 MiB: headers of fmt, Eigen, CLI11, doctest, fast-cpp-csv-parser and
# nlohmann-json, plus libfmt's shared library), without docs and with symbolic links replaced by copies, so the
# folder travels as plain files. scripts/gpu-check.sh finds it there (CMAKE_PREFIX_PATH, LD_LIBRARY_PATH).
#   usage: scripts/gpu-bundle.sh [DIR]      (DIR default: <repo>/gpu-bundle; rebuilt from scratch each time)
# Exit status: 0 done, 1 a package could not be fetched or unpacked, 2 bad usage.
set -euo pipefail

PACKAGES=(libfmt-dev libfmt9 libeigen3-dev libcli11-dev doctest-dev libfccp-dev nlohmann-json3-dev)

if [ $# -gt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    echo "usage: $0 [DIR]   (default DIR: the repository's gpu-bundle/)" >&2
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/gpu-bundle}
for tool in apt-get dpkg; do
    command -v "$tool" > /dev/null || { echo "gpu-bundle: $tool not found (a Debian machine is needed)" >&2; exit 1; }
done

rm -rf "$DIR"
mkdir -p "$DIR/debs" "$DIR/root"
DIR=$(cd "$DIR" && pwd)
# apt-get download writes into the current directory; as root it warns that _apt cannot write there (harmless)
fetch() { (cd "$DIR/debs" && apt-get download "${PACKAGES[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed"); }
if ! fetch && [ "$(id -u)" = 0 ]; then
    # a fresh container may have no package lists yet (make deps updates them only when it installs something)
    apt-get update -qq && fetch
fi
for p in "${PACKAGES[@]}"; do
    ls "$DIR/debs/${p}"_*.deb > /dev/null 2>&1 || { echo "gpu-bundle: $p was not downloaded (apt-get update?)" >&2; exit 1; }
done
for deb in "$DIR"/debs/*.deb; do dpkg -x "$deb" "$DIR/root"; done
rm -rf "$DIR/root/usr/share/doc" "$DIR/root/usr/share/lintian" "$DIR/debs"
# links -> copies of their targets (the transfer to the GPU host keeps only plain files for sure)
find "$DIR/root" -type l | while read -r link; do
    target=$(readlink -f "$link")
    rm "$link"
    cp "$target" "$link"
done
{
    echo "# kvsim GPU bundle, $(date -u +%FT%TZ), from $(. /etc/os-release && echo "$PRETTY_NAME")"
    for p in "${PACKAGES[@]}"; do echo "$p $(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')"; done
} > "$DIR/MANIFEST"
echo "gpu-bundle: $(du -sh "$DIR" | cut -f1) in $DIR"
cat "$DIR/MANIFEST"
