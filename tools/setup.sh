#!/usr/bin/env bash
# Sets up a fresh Debian 12 / Ubuntu 22.04+ machine and builds tpserve into build/.
# Installs only Debian packages; the CUDA backend is built too where /usr/local/cuda exists.
# (oneDNN, libdnnl-dev, is optional in CMake: a build without it runs prefill on OpenBLAS.)
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
PKGS=(build-essential cmake ninja-build pkg-config git
      libabsl-dev nlohmann-json3-dev libpcre2-dev libicu-dev libopenblas-dev
      libgtest-dev libgmock-dev libopenmpi-dev openmpi-bin curl
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libcpp-httplib-dev libboost-dev libssl-dev
      libcurl4-openssl-dev ccache
      libdnnl-dev  # optional in CMake: bf16 prefill GEMMs on AMX / AVX512-BF16 (kernels/cpu/gemm_onednn.cc)
      python3-venv)  # tests/client_conformance_test.sh: the openai SDK and grpcurl in a venv
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# ccache (Debian) keeps compiled objects between builds and between checkouts: paths are
# hashed relative to CCACHE_BASEDIR, so a fresh clone elsewhere still hits the cache.
LAUNCHER=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
  export CCACHE_NOHASHDIR=1  # debug info names the build directory; hit anyway
  LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# TPSERVE_SERVING=ON: the packages above are installed, so a front-end dependency CMake cannot
# find fails the build here instead of leaving out the serving, conformance and router tests
# (AUTO, CMake's default, builds without them where gRPC or Boost is missing, as on the GPU
# machines: bench/gpu_check.sh configures OFF).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPSERVE_SERVING=ON "${LAUNCHER[@]}" ${TPSERVE_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
