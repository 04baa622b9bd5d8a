#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The runtime's own PTX kernel, templates/bwd_dlse.ptx (the gradient through
# lse: D -= dlse between a backward's preprocess and its main kernel), which
# the driver compiles at run time: ptxas must assemble it for sm_80 and
# sm_90 with no local memory, and its loop must be one load of each input,
# one FADD (D + -dlse) and one store. Skipped (77) without ptxas
# ($FATUNE_PTXAS, the CUDA toolkit's, the PATH's); the SASS part without a
# cuobjdump (find_cuobjdump.sh).
#   bash tests/test_dlse_ptx.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
ptx="$here/../templates/bwd_dlse.ptx"
ptxas=""
for c in "${FATUNE_PTXAS:-}" "${CUDA_ROOT:-/usr/local/cuda}/bin/ptxas" "$(command -v ptxas || true)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then ptxas=$c; break; fi
done
[ -n "$ptxas" ] || { echo "skipped: no ptxas"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for arch in sm_80 sm_90; do
  if ! "$ptxas" -arch=$arch -v "$ptx" -o "$tmp/$arch.cubin" > "$tmp/$arch.log" 2>&1; then
    echo "FAIL: ptxas -arch=$arch:"; cat "$tmp/$arch.log"; fail=1; continue
  fi
  if ! grep -q "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" "$tmp/$arch.log"; then
    echo "FAIL: $arch uses local memory:"; cat "$tmp/$arch.log"; fail=1
  else
    echo "ok: ptxas -arch=$arch, no local memory"
  fi
done
[ $fail = 0 ] || exit 1
FATUNE_REQUIRE_CUOBJDUMP=0
# shellcheck source=find_cuobjdump.sh
. "$here/find_cuobjdump.sh"
sass=$("$tool" -sass "$tmp/sm_90.cubin")
n_fadd=$(grep -c "FADD" <<< "$sass"); n_ldg=$(grep -c "LDG" <<< "$sass"); n_stg=$(grep -c "STG" <<< "$sass")
if [ "$n_fadd" = 1 ] && [ "$n_ldg" = 2 ] && [ "$n_stg" = 1 ] && grep -q "FADD R[0-9]*, R[0-9]*, -R" <<< "$sass"; then
  echo "ok: sm_90 SASS: 2 LDG, 1 FADD (D + -dlse), 1 STG"
else
  echo "FAIL: sm_90 SASS has $n_ldg LDG, $n_fadd FADD, $n_stg STG:"; grep -E "LDG|FADD|STG" <<< "$sass"; exit 1
fi
echo "test_dlse_ptx: passed"
