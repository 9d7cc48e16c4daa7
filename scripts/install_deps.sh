#!/usr/bin/env bash
# Installs every build/test dependency of DeepInfer from Debian packages (idempotent).
# The CUDA toolkit (nvcc 13, NCCL) is expected under /usr/local/cuda on machines that build the
# CUDA backend; it is not a Debian package.
set -euo pipefail
PKGS=(cmake ninja-build g++ clang libclang-rt-14-dev clang-format
      libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libicu-dev python3)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
