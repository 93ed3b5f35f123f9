#!/usr/bin/env bash
# Installs every Debian package strata's build, tests, benchmarks and demo need.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

source "$(dirname "$0")/packages.sh"
packages=("${strata_library_packages[@]}" "${strata_tool_packages[@]}")

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
