#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs the whole test suite: CPU tests, the slow test that compiles
# every variant of the space with NVRTC for sm_80 and sm_90a, and the gpu
# tests (shown as skipped where no driver is found).
set -euo pipefail
cd "$(dirname "$0")/.."
FATUNE_EXTRA_PACKAGES="chromium" scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
