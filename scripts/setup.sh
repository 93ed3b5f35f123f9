#!/usr/bin/env bash
# Installs every Debian package strata's build, tests, benchmarks and demo need.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  openmpi-bin libopenmpi-dev        # distributed engine on CPU clusters, bootstrap for NCCL
  libopenblas-openmp-dev            # sgemm; the OpenMP build shares one thread pool with our kernels
  libxxhash-dev                     # fast checksums for checkpoint shards
  libhwloc-dev                      # host topology detection
  nlohmann-json3-dev                # metrics, summaries, manifests
  libtomlplusplus-dev               # config and topology files
  libcli11-dev                      # command line
  libpcre2-dev                      # GPT-2 BPE pre-tokenization: Unicode letter/number classes, lookahead
  libfmt-dev                        # formatting
  libgtest-dev libgmock-dev         # unit tests
  libbenchmark-dev                  # micro-benchmarks
  python3-torch python3-numpy       # test reference and benchmark peer only, never at run time
  fortunes                          # demo corpus: real English text (fortune files), installed, never downloaded
  clang libclang-rt-14-dev          # fuzzing (scripts/fuzz.sh): clang-14 and its libFuzzer + sanitizer runtimes
  libomp-dev                        # OpenMP for clang, which configures the fuzz build (build-fuzz/)
  iproute2 util-linux ethtool nftables  # the namespace cluster (scripts/cluster.sh): ip netns, tc, unshare, MTU-sized segments, loss rules
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all ${#packages[@]} packages present"
