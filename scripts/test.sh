#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs the whole test suite: CPU tests, the slow test that compiles
# the space with NVRTC for sm_80 and sm_90a, and the gpu tests (shown as
# skipped where no driver is found).
set -euo pipefail
cd "$(dirname "$0")/.."
# The slow test compiles a covering sample of the space (one variant of each
# family, direction, head dim, dtype and mask per architecture; about 7
# minutes on two cores, beside the other tests); FATUNE_COMPILE_COVER=0
# compiles all of it (over an hour). Chromium renders the report
# (test_report_render); pytest collects and runs python/tests (test_pytest).
export FATUNE_COMPILE_COVER=${FATUNE_COMPILE_COVER:-1}
FATUNE_EXTRA_PACKAGES="chromium" FATUNE_EXTRA_PYTHON="pytest" scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
