# SPDX-License-Identifier: MIT
# Sourced by the tests that read machine code on the CPU (test_sass_*.sh):
# sets $tool to a cuobjdump -- $FATUNE_CUOBJDUMP, the CUDA toolkit's, the
# PATH's, or the one scripts/install-deps.sh installs from PyPI
# (nvidia-cuda-cuobjdump) -- or, without one, exits the test: skipped (77),
# or failed where FATUNE_REQUIRE_CUOBJDUMP=1 (CI) wants it read.
tool=""
for c in "${FATUNE_CUOBJDUMP:-}" "${CUDA_ROOT:-/usr/local/cuda}/bin/cuobjdump" "$(command -v cuobjdump || true)" \
         "$HOME/.cache/fatune/tools/nvidia/cu13/bin/cuobjdump"; do
  if [ -n "$c" ] && [ -x "$c" ]; then tool=$c; break; fi
done
if [ -z "$tool" ]; then
  echo "no cuobjdump (set FATUNE_CUOBJDUMP, or run scripts/install-deps.sh)"
  [ "${FATUNE_REQUIRE_CUOBJDUMP:-0}" = 1 ] && exit 1
  exit 77
fi
