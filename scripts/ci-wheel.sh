#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI's wheel step: `pip wheel .` (pyproject.toml: scikit-build-core drives
# the CMake build of libfatune and the shipped tables' database, nothing
# else), the wheel installed into a fresh virtual environment, and, from
# outside the source tree, python/tests/wheel_smoke.py: the installed
# package imports, loads the libfatune inside it, and selects for an
# offline H200 from the tables it carries. No GPU, no PyTorch. A cold
# build on CI's two cores takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
# The build's own environment comes from PyPI (scikit-build-core); the
# build directory is fresh so that the step measures a cold build.
"$work/venv/bin/pip" wheel --no-deps -w "$work/dist" -C build-dir="$work/build" "$root"
"$work/venv/bin/pip" install --no-deps "$work/dist"/fatune-*.whl
unset FATUNE_LIB FATUNE_TABLES
cd "$work" && "$work/venv/bin/python" "$root/python/tests/wheel_smoke.py"
