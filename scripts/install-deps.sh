#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what fatune's build and tests need and the machine lacks: a C
# compiler, CMake, Lua 5.4, SQLite and zlib development files (Debian/Ubuntu
# packages), and Chromium for the report rendering test. The CUDA toolkit
# (headers, NVRTC) is expected at /usr/local/cuda (or $CUDA_ROOT).
set -euo pipefail
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in build-essential cmake liblua5.4-dev libsqlite3-dev zlib1g-dev python3 ${FATUNE_EXTRA_PACKAGES:-}; do
  have_pkg "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${need[@]}"
fi
cuda=${CUDA_ROOT:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "install-deps: no CUDA toolkit at $cuda (need include/cuda.h, include/nvrtc.h and libnvrtc)." >&2
  echo "install-deps: install the CUDA toolkit 12 or 13, or set CUDA_ROOT." >&2
  exit 1
fi
# cuobjdump (and the nvdisasm it calls) reads the shipped winners' machine
# code on the CPU (tests/test_sass_winners.sh); the toolkit at $cuda may
# lack them: then NVIDIA's PyPI packages, into fatune's cache folder.
tools=$HOME/.cache/fatune/tools
if [ ! -x "$cuda/bin/cuobjdump" ] && ! command -v cuobjdump >/dev/null && [ ! -x "$tools/nvidia/cu13/bin/nvdisasm" ]; then
  python3 -m pip install -q --disable-pip-version-check --target "$tools" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm ||
    python3 -m pip install -q --disable-pip-version-check --break-system-packages --target "$tools" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm ||
    echo "install-deps: could not install cuobjdump (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm); test_sass_winners will skip" >&2
fi
# Python modules the tests use, for the python3 that ctest runs (the first
# on PATH, which may be another than Debian's): FATUNE_EXTRA_PYTHON="pytest"
# lets test_pytest collect and run python/tests instead of skipping. pip's
# user site first, then Debian's package (python3-NAME, for Debian's own
# python3, whose pip refuses a user install).
for m in ${FATUNE_EXTRA_PYTHON:-}; do
  python3 -c "import $m" 2>/dev/null && continue
  python3 -m pip install -q --disable-pip-version-check --user "$m" 2>/dev/null ||
    { SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "python3-$m" >/dev/null; } ||
    echo "install-deps: could not install the Python module $m (pip install $m); the tests that need it will skip" >&2
  python3 -c "import $m" 2>/dev/null ||
    echo "install-deps: $(command -v python3) cannot import $m; the tests that need it will skip" >&2
done
