#!/usr/bin/env bash
# Copies the Debian-packaged build dependencies of the engine (abseil, GoogleTest,
# nlohmann-json, PCRE2, OpenBLAS + its Fortran runtime, ICU, pkgconf) from this machine
# into .gpu_deps/ in the /usr layout, so that bench/gpu_check.sh can build on a bare GPU
# machine that has none of them. Checked by running gpu_check.sh with only the bundle.
#
#   tools/make_gpu_deps_bundle.sh [OUT_DIR]      # default: <repo>/.gpu_deps
#
# Relocatable: the CMake package files compute their prefix from their own location, and
# the pkg-config files are rewritten to ${pcfiledir}-relative paths. Files over 4 MiB
# (ICU's data, OpenBLAS) are stored xz-compressed and listed in COMPRESSED; gpu_check.sh
# unpacks them. libstdc++ goes to compat/, used only where the system's is older.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/.gpu_deps}
arch=x86_64-linux-gnu
lib=/usr/lib/$arch
max_mib=45

need() { [[ -e $1 ]] || { echo "make_gpu_deps_bundle: missing $1 (apt-get install $2)" >&2; exit 1; }; }
need /usr/include/absl libabsl-dev
need $lib/cmake/absl libabsl-dev
need $lib/cmake/GTest libgtest-dev
need /usr/share/cmake/nlohmann_json nlohmann-json3-dev
need /usr/include/pcre2.h libpcre2-dev
need /usr/include/unicode/utypes.h libicu-dev
need $lib/openblas-pthread/libopenblas.so libopenblas-pthread-dev
need /usr/bin/pkgconf pkgconf

rm -rf "$out"
mkdir -p "$out"
# cp --parents keeps each path below $out (run from / with relative paths: coreutils'
# --parents trips over absolute ones); -a keeps the (relative) symlinks.
copy() { for p in "$@"; do (cd / && cp -a --parents "${p#/}" "$out"); done; }

# Headers.
copy /usr/include/absl /usr/include/gtest /usr/include/gmock /usr/include/nlohmann /usr/include/pcre2.h /usr/include/unicode \
     /usr/include/$arch/openblas-pthread
# CMake package files.
copy $lib/cmake/absl $lib/cmake/GTest /usr/share/cmake/nlohmann_json
# Libraries: shared abseil (what abslTargets names), static GoogleTest (GTestConfig checks
# that gmock exists too), the rest shared.
copy $lib/libabsl_*.so* $lib/libgtest.a $lib/libgtest_main.a $lib/libgmock.a $lib/libgmock_main.a $lib/libpcre2-8.so* $lib/libicuuc.so* \
     $lib/libicudata.so* $lib/openblas-pthread/libopenblas.so* $lib/openblas-pthread/libopenblasp-r*.so \
     $lib/libgfortran.so.5* $lib/libquadmath.so.0*
# pkg-config and its files.
copy /usr/bin/pkgconf $lib/libpkgconf.so.3*
ln -s pkgconf "$out/usr/bin/pkg-config"
mkdir -p "$out$lib/pkgconfig"
cp $lib/pkgconfig/libpcre2-8.pc "$out$lib/pkgconfig/"
cp "$(readlink -f $lib/pkgconfig/openblas.pc)" "$out$lib/pkgconfig/openblas.pc"
# /usr/... -> ${pcfiledir}/../../.. (pcfiledir is usr/lib/<arch>/pkgconfig).
sed -i -E 's#^([A-Za-z_]+)=/usr(/|$)#\1=${pcfiledir}/../../..\2#' "$out$lib"/pkgconfig/*.pc
# The system libstdc++ is used unless it is older than the one these libraries need.
mkdir -p "$out/compat"
cp -a $lib/libstdc++.so.6* "$out/compat/"

# Large files travel compressed.
: > "$out/COMPRESSED"
while IFS= read -r -d '' f; do
  xz -9 -T2 "$f"
  echo "${f#"$out"/}" >> "$out/COMPRESSED"
done < <(find "$out" -type f -size +4M -print0)

cat > "$out/README" <<EOF
Build dependencies for bench/gpu_check.sh, copied from $(. /etc/os-release; echo "$PRETTY_NAME")
by tools/make_gpu_deps_bundle.sh on $(date -u +%Y-%m-%d). Not committed (.gitignore).
EOF

size_mib=$(( $(du -sb "$out" | cut -f1) / 1048576 ))
echo "make_gpu_deps_bundle: $out: ${size_mib} MiB ($(wc -l < "$out/COMPRESSED") files xz-compressed)"
if (( size_mib > max_mib )); then
  echo "make_gpu_deps_bundle: over the ${max_mib} MiB budget" >&2
  exit 1
fi
