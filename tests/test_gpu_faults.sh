#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fault isolation, on a GPU: the faulty family (tests/data/faults: an
# out-of-bounds write, a trap, a hang) is tuned alongside the real space.
# The tuner must finish with status 0, record the oob and trap variants as
# failed with a "fault" reason and the hang as "timeout" (the watchdog, within
# a bounded time), keep checking real variants after each fault (the worker
# restarted, the GPU usable), and choose the same winners as a run without
# the faulty family (or one within the close-contender margin of it).
# Exits 77 where no CUDA driver or GPU is found. $1 is the fatune binary.
set -u
F=$1
SRC=${FATUNE_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
WATCHDOG_S=5          # --timeout: the hang must be ended this quickly ...
MARGIN=1.05           # a winner that differs must be within 5% of the other's time
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
Q=(--gpu 0 --head-dim 64 --dtype fp16 --mask none --seqlen 1024 --timeout "$WATCHDOG_S")

# No driver or no GPU: skip.
python3 - <<'PY' || { echo "no CUDA driver or GPU: skipped"; exit 77; }
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    sys.exit(1)
n = ctypes.c_int(0)
sys.exit(0 if cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0 else 1)
PY

# Two template folders: the built-in space, and the same with the faulty
# family listed first (so real variants run after every fault).
mkdir -p "$tmp/plain" "$tmp/faults"
cp -r "$SRC/generator" "$SRC/templates" "$tmp/plain/"
cp -r "$SRC/generator" "$SRC/templates" "$tmp/faults/"
cp "$SRC/tests/data/faults/generator/family_faulty.lua" "$tmp/faults/generator/"
cp "$SRC/tests/data/faults/templates/fwd_faulty.cu" "$tmp/faults/templates/"
sed -i 's/^\(\s*\)fat.require("family_mma80"),/\1fat.require("family_faulty"),\n&/' \
  "$tmp/faults/generator/space.lua"
grep -q 'fat.require("family_faulty")' "$tmp/faults/generator/space.lua" ||
  { echo "FAIL: could not add the faulty family to space.lua"; exit 1; }

t0=$(date +%s)
"$F" --templates "$tmp/plain" --db "$tmp/plain.db" "${Q[@]}" >"$tmp/plain.out" 2>"$tmp/plain.err"
rc_plain=$?
t1=$(date +%s)
"$F" --templates "$tmp/faults" --db "$tmp/faults.db" "${Q[@]}" -v >"$tmp/faults.out" 2>"$tmp/faults.err"
rc_faults=$?
t2=$(date +%s)
cat "$tmp/faults.err"
exec python3 - "$tmp" "$rc_plain" "$rc_faults" $((t1 - t0)) $((t2 - t1)) "$WATCHDOG_S" "$MARGIN" <<'PY'
import sqlite3, sys
tmp, rc_plain, rc_faults, s_plain, s_faults, watchdog, margin = sys.argv[1:]
rc_plain, rc_faults, s_plain, s_faults = int(rc_plain), int(rc_faults), int(s_plain), int(s_faults)
watchdog, margin = int(watchdog), float(margin)
fails = []
def fail(m):
    fails.append(m); print("FAIL: " + m)
if rc_plain != 0: fail("run without faults: status %d" % rc_plain)
if rc_faults != 0: fail("run with faults: status %d" % rc_faults)
WIN = """SELECT p.dtype, p.head_dim, p.mask, p.seqlen_q, v.name, t.median_ms
         FROM winners w JOIN problems p ON p.id = w.problem_id JOIN variants v ON v.id = w.variant_id
         JOIN timings t ON t.id = w.timing_id ORDER BY 1, 2, 3, 4"""
def winners(db):
    c = sqlite3.connect(db)
    try: return {r[:4]: (r[4], r[5]) for r in c.execute(WIN)}
    finally: c.close()
plain, faults = winners(tmp + "/plain.db"), winners(tmp + "/faults.db")
if not plain: fail("no winners without faults")
if set(plain) != set(faults): fail("problems with winners differ: %s vs %s" % (sorted(plain), sorted(faults)))
c = sqlite3.connect(tmp + "/plain.db")
for prob, (name, ms) in faults.items():
    if ".faulty." in name: fail("%s: the faulty %s won" % (prob, name))
    if prob not in plain or plain[prob][0] == name: continue
    # a different winner: it must have been a close contender without faults too
    row = c.execute("""SELECT min(t.median_ms) FROM timings t JOIN variants v ON v.id = t.variant_id
                       WHERE v.name = ? AND t.retired = 0""", (name,)).fetchone()
    if row[0] is None or row[0] > plain[prob][1] * margin:
        fail("%s: winner %s with faults, %s (%.4f ms) without; %s took %s ms there" %
             (prob, name, plain[prob][0], plain[prob][1], name, row[0]))
c.close()
c = sqlite3.connect(tmp + "/faults.db")
rows = c.execute("""SELECT v.name, ch.passed, ch.reason FROM checks ch JOIN variants v ON v.id = ch.variant_id
                    WHERE v.family = 'faulty'""").fetchall()
want = {"oob": "fault", "trap": "fault", "hang": "timeout"}
seen = {}
for name, passed, reason in rows:
    mode = name.rsplit(".", 1)[1]
    seen[mode] = reason
    if passed or not reason.startswith(want[mode]):
        fail("%s: passed=%d reason %r, want a failure starting %r" % (name, passed, reason, want[mode]))
if sorted(seen) != sorted(want): fail("faulty variants checked: %s, want %s" % (sorted(seen), sorted(want)))
real_passed = c.execute("""SELECT count(*) FROM checks ch JOIN variants v ON v.id = ch.variant_id
                           WHERE v.family != 'faulty' AND ch.passed = 1""").fetchone()[0]
ic = c.execute("PRAGMA integrity_check").fetchall()
c.close()
if real_passed == 0: fail("no real variant passed after the faults: the GPU was not usable")
if ic != [("ok",)]: fail("integrity_check: %r" % ic)
# the hang costs about one watchdog period (plus a worker restart), not more
bound = s_plain + 6 * watchdog + 60
if s_faults > bound: fail("run with faults took %d s, more than %d" % (s_faults, bound))
print("faults injected: %d (%s), survived: %d; winners the same: %d problems; %d s vs %d s" %
      (len(rows), ", ".join("%s: %s" % kv for kv in sorted(seen.items())), len(rows) if not fails else 0,
       len(faults), s_faults, s_plain))
sys.exit(1 if fails else 0)
PY
