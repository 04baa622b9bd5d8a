#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The machine code of the shipped tables' Hopper winners, read on the CPU
# (cuobjdump, no GPU): every wgmma90 and ws90 winner's sm_90a cubin issues
# the warpgroup products (HGMMA; an e4m3 one QGMMA, fp8's, and stmatrix for
# its transposed V); every forward one keeps nothing in local
# memory (no LDL or STL: no spills, no register array moved to the stack);
# every ws90 winner also loads through the tensor copy engine (UTMALDG), a
# forward one trades registers between its warpgroups (USETMAXREG), a
# backward one adds dQ by bulk reductions (UBLKRED) -- past head dim 128,
# where the ring of Q and dO tiles leaves no dQ buffer, by vector
# reductions from the registers (REDG ... F32x4), its two consumers of
# each 64 keys trading registers with the producer (USETMAXREG). Backward
# winners with local memory are listed, not failed: the wgmma90 ones at
# d128 and d256 causal and the ws90 DQ_KEYS 1 ones at d128 spill 8-36
# bytes (notes/kernel-log.md ws3), and the issue that wants none is open.
# Run from the build folder (runtime/fatune_tables.db); $1 is the fatune
# binary (unused).
# cuobjdump: $FATUNE_CUOBJDUMP, the CUDA toolkit's, the PATH's, or the one
# scripts/install-deps.sh installs from PyPI (nvidia-cuda-cuobjdump). Without
# one the test skips (77), unless FATUNE_REQUIRE_CUOBJDUMP=1 (CI) makes that
# a failure.
set -u
tables=runtime/fatune_tables.db
# shellcheck source=find_cuobjdump.sh
. "$(dirname "$0")/find_cuobjdump.sh"
[ -f "$tables" ] || { echo "FAIL: no $tables (the build makes it)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One cubin file per distinct winner variant: NAME.cubin.
python3 - "$tables" "$tmp" <<'PY' || exit 1
import sqlite3, sys
db, out = sys.argv[1], sys.argv[2]
con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
rows = con.execute(
    "SELECT DISTINCT v.name, b.cubin FROM winners w JOIN variants v ON v.id = w.variant_id"
    " JOIN builds b ON b.variant_id = v.id"
    " WHERE v.family IN ('wgmma90', 'ws90') AND b.arch = 'sm_90a' AND b.ok = 1"
    " AND b.cubin IS NOT NULL").fetchall()
for name, cubin in rows:
    open(f"{out}/{name}.cubin", "wb").write(cubin)
print(f"{len(rows)} Hopper winners' cubins")
PY
pass=0 fail=0 ws=0 bws=0 spilling=0
for f in "$tmp"/*.cubin; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .cubin)
  sass=$("$tool" --dump-sass "$f" 2>&1) || { echo "FAIL: $name: cuobjdump: $sass"; fail=$((fail + 1)); continue; }
  why=()
  case $name in
    *.e4m3.*)
      grep -q 'QGMMA' <<<"$sass" || why+=("no QGMMA")
      grep -q 'STSM' <<<"$sass" || why+=("no stmatrix (STSM: the transposed V)")
      ;;
    *) grep -q 'HGMMA' <<<"$sass" || why+=("no HGMMA") ;;
  esac
  if grep -qE '\b(LDL|STL)(\.[A-Z0-9]+)*\b' <<<"$sass"; then
    case $name in
      bwd.*) echo "note: $name keeps values in local memory (LDL/STL)"; spilling=$((spilling + 1)) ;;
      *) why+=("local memory (LDL/STL)") ;;
    esac
  fi
  case $name in
    fwd.ws90.*)
      ws=$((ws + 1))
      grep -q 'UTMALDG' <<<"$sass" || why+=("no TMA load (UTMALDG)")
      grep -q 'USETMAXREG' <<<"$sass" || why+=("no register trade (USETMAXREG)")
      ;;
    bwd.ws90.*)
      bws=$((bws + 1))
      grep -q 'UTMALDG' <<<"$sass" || why+=("no TMA load (UTMALDG)")
      # The name's head dim: bwd.ws90.DTYPE.dN.MASK.TAG
      d=$(sed -E 's/^bwd\.ws90\.[a-z0-9-]+\.d([0-9]+)\..*/\1/' <<<"$name")
      if ! [[ $d =~ ^[0-9]+$ ]]; then
        why+=("no head dim in the name")
      elif [ "$d" -gt 128 ]; then
        grep -q 'REDG\.E\.ADD\.F32x4' <<<"$sass" || why+=("no vector reduction of dQ (REDG F32x4)")
        grep -q 'USETMAXREG' <<<"$sass" || why+=("no register trade (USETMAXREG)")
      else
        grep -q 'UBLKRED' <<<"$sass" || why+=("no bulk reduction (UBLKRED)")
      fi
      ;;
  esac
  if [ ${#why[@]} -eq 0 ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    printf 'FAIL: %s: %s\n' "$name" "$(IFS=,; echo "${why[*]}")"
  fi
done
# The table ships ws90 winners (the H200's forward): none would mean the
# query above or the table lost them.
[ "$ws" -gt 0 ] || { echo "FAIL: no ws90 winner in $tables"; fail=$((fail + 1)); }
[ "$bws" -gt 0 ] || { echo "FAIL: no ws90 backward winner in $tables"; fail=$((fail + 1)); }
echo "$pass passed, $fail failed ($ws ws90 forward, $bws ws90 backward winners; $spilling backward with local memory)"
[ "$fail" -eq 0 ]
