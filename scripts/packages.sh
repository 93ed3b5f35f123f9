# The Debian packages strata needs (sourced by setup.sh, gpu-bundle.sh and gpu-check.sh), in two
# groups: what its build and tests compile, link and run against beyond a C++ compiler, CMake
# and ninja, which a GPU machine without them gets from the bundle (docs/gpu.md), and the rest.
# shellcheck disable=SC2034  # the arrays are read by the scripts that source this file
strata_library_packages=(
  pkg-config                        # CMake's pkg_check_modules (hwloc, PCRE2)
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
)
strata_tool_packages=(
  build-essential cmake ninja-build
  python3-torch python3-numpy       # test reference and benchmark peer only, never at run time
  fortunes                          # demo corpus: real English text (fortune files), installed, never downloaded
  clang libclang-rt-14-dev          # fuzzing (scripts/fuzz.sh): clang-14 and its libFuzzer + sanitizer runtimes
  libomp-dev                        # OpenMP for clang, which configures the fuzz build (build-fuzz/)
  iproute2 util-linux ethtool nftables  # the namespace cluster (scripts/cluster.sh): ip netns, tc, unshare, MTU-sized segments, loss rules
)
