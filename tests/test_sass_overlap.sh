#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The ws90 forward's OVERLAP 2 in machine code, read on the CPU (NVRTC and
# cuobjdump, no GPU): in every region of the key loop the softmax's
# exponentials (MUFU.EX2) lie between the wait for S(j)
# (WARPGROUP.DEPBAR.LE gsb0, 0x1) and the wait for P·V(j - 1) (gsb0, 0x0),
# so they run under P·V. OVERLAP 1 asks for the same order in the source,
# and ptxas hoists the second wait above the softmax
# (templates/fwd_ws90.cu, hold_wait_behind): its pattern is printed beside,
# for the record, and not judged (another ptxas may schedule it otherwise).
# $1 is the fatune binary. cuobjdump as tests/test_sass_winners.sh finds it;
# without one the test skips (77), unless FATUNE_REQUIRE_CUOBJDUMP=1.
set -u
fatune=$1
# shellcheck source=find_cuobjdump.sh
. "$(dirname "$0")/find_cuobjdump.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Compile only (no GPU here, or FATUNE_LIBCUDA pointing nowhere): status 3.
FATUNE_LIBCUDA=$tmp/no-driver "$fatune" --db "$tmp/o.db" --arch sm_90a --family ws90 --head-dim 64,128 --dtype bf16 \
  --mask none,causal --seqlen 1024 --param BLOCK_M=128,BLOCK_N=128,PINGPONG=1,PERSISTENT=0 -q > "$tmp/log" 2>&1
rc=$?
[ "$rc" -eq 3 ] || { echo "FAIL: fatune exited $rc, not 3 (compiled, no GPU)"; cat "$tmp/log"; exit 1; }
python3 - "$tmp/o.db" "$tmp" <<'PY' || exit 1
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rows = con.execute("SELECT v.name, b.cubin FROM builds b JOIN variants v ON v.id = b.variant_id"
                   " WHERE b.ok = 1 AND v.params LIKE '%OVERLAP=_%' AND v.params NOT LIKE '%OVERLAP=0%'").fetchall()
for name, cubin in rows:
    open(f"{sys.argv[2]}/{name}.cubin", "wb").write(cubin)
print(f"{len(rows)} cubins of OVERLAP 1 and 2")
PY
pass=0 fail=0 held=0
for f in "$tmp"/*.cubin; do
  name=$(basename "$f" .cubin)
  # The waits and the exponentials in order: W1 (S waited), W0 (all
  # waited), E<n> (n MUFU.EX2 in a row).
  order=$("$tool" --dump-sass "$f" | grep -E 'WARPGROUP\.DEPBAR|MUFU\.EX2' |
    sed -E 's/.*DEPBAR\.LE gsb0, 0x1.*/W1/; s/.*DEPBAR\.LE gsb0, 0x0.*/W0/; s/.*MUFU\.EX2.*/E/' |
    awk '$0 == "E" { n++; next } { if (n) printf "E%d ", n; n = 0; printf "%s ", $0 } END { if (n) printf "E%d", n }')
  case $name in
    *s2O*)
      held=$((held + 1))
      # every W1 followed by exponentials before the next wait, and at least
      # one such region (the key loop)
      if grep -qE 'W1 E[0-9]+ W0' <<<"$order" && ! grep -qE 'W1 W0' <<<"$order"; then
        pass=$((pass + 1))
      else
        echo "FAIL: $name: the softmax is not between the waits: $order"
        fail=$((fail + 1))
      fi ;;
    *) echo "note: $name (OVERLAP 1): $order" ;;
  esac
done
[ "$held" -gt 0 ] || { echo "FAIL: no OVERLAP 2 variant compiled"; exit 1; }
echo "$pass passed, $fail failed ($held OVERLAP 2 variants)"
[ "$fail" -eq 0 ]
