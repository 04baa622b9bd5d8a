#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fresh machine → installed, built, and the main job run:
#   scripts/setup.sh [fatune arguments]      (default: --gpu 0 --head-dim 128)
# Installs what is missing (Debian/Ubuntu packages; needs root or sudo), builds
# into build/, then runs fatune. Without a GPU fatune generates and compiles
# everything, says so, and exits with status 3, which this script accepts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
[ $# -gt 0 ] || set -- --gpu 0 --head-dim 128
rc=0
build/fatune "$@" || rc=$?
if [ "$rc" -eq 3 ]; then
  echo "setup: built and compiled; tuning needs an NVIDIA GPU (sm_80 or newer) and its driver."
  exit 0
fi
exit "$rc"
