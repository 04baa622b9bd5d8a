#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks --gpu LIST/all on a GPU host (issue 22), one GPU or several: a
# cold `fatune --gpu 0` run and a `fatune --gpu all` run of the same small
# query into two databases, then, for each: PRAGMA integrity_check and
# foreign_key_check; every (variant, problem) checked exactly once a GPU
# model, as many as the --gpu 0 run checked (the same query, the same
# architecture); a devices row per GPU of the run, every timing naming a
# device of its own gpus row, each problem's timings (its re-timing job
# included) from one device; one winner per problem and model; and the
# winners of the two runs side by side (a different winner is reported, not
# failed: close contenders, within 3%, may fall either way; one more than
# 3% slower than the other run's is flagged).
#
# Run from the repository root, with a build (PACK, default build):
#   bash bench/multi_gpu_check.sh
# or after a device call's tuning runs: AFTER=bench/multi_gpu_check.sh with
# scripts/gpu_call.sh, which sets PACK and OUT. On a one-GPU host --gpu all
# is --gpu 0 through the same code (one lane, in the caller's thread); the
# hand-out to several lanes and their threads need two GPUs or more.
#   QUERY   the flags of both runs (default: d64 bf16, none and causal,
#           seqlen 1024 and 4096: 4 problems)
#   RUN_S   the most seconds each run may take (SIGINT then: what it
#           finished is kept and checked; default 900)
#   SHARE_BUILDS=0  the second run compiles again instead of starting from
#           the first one's builds (its checks, timings and winners removed)
# Output, logs and both databases in OUT (default a new folder under
# /tmp). Exit 0 when every check holds, 1 when one fails, 3 without a GPU.
set -u -o pipefail
B=${PACK:-build}
F=$B/fatune
OUT=${OUT:-$(mktemp -d /tmp/fatune-multi-gpu-XXXXXX)}
QUERY=${QUERY:---head-dim 64 --dtype bf16 --mask none,causal --seqlen 1024,4096}
RUN_S=${RUN_S:-900}
mkdir -p "$OUT"
[ -x "$F" ] || { echo "multi_gpu_check: no $F: build first (or set PACK)"; exit 2; }
command -v python3 >/dev/null || { echo "multi_gpu_check: needs python3"; exit 2; }
command -v nvidia-smi >/dev/null &&
  nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv,noheader

# run NAME GPUS: one tuning run into $OUT/NAME.db, its log and --json beside it.
run() {
  local name=$1 gpus=$2 t0 rc
  echo "== fatune --gpu $gpus $QUERY ($(date -u +%T))"
  t0=$(date +%s)
  # shellcheck disable=SC2086  # QUERY's flags are words on purpose
  timeout -s INT "$RUN_S" "$F" --gpu "$gpus" $QUERY --db "$OUT/$name.db" \
    --json "$OUT/$name.json" > "$OUT/$name.out" 2> "$OUT/$name.log"
  rc=$?
  echo "rc $rc in $(( $(date +%s) - t0 )) s"
  grep -E '^fatune: (tuning on|compiled|[0-9]+ checked|every|GPU [0-9]+ drops)' "$OUT/$name.log"
  return $rc
}

run cold 0
rc=$?
[ $rc -eq 3 ] && { echo "multi_gpu_check: no GPU here"; exit 3; }
if [ "${SHARE_BUILDS:-1}" = 1 ]; then
  # The first run's variants and builds, none of its measurements: the
  # second run compiles nothing and measures everything again.
  python3 - "$OUT/cold.db" "$OUT/all.db" <<'PY' || exit 1
import sqlite3, sys
src, dst = sys.argv[1], sys.argv[2]
con = sqlite3.connect(src)
con.execute("VACUUM INTO ?", (dst,))
con.close()
con = sqlite3.connect(dst)
con.executescript("""PRAGMA foreign_keys = ON;
DELETE FROM winners; DELETE FROM timing_jobs; DELETE FROM timings; DELETE FROM checks;
DELETE FROM external_timings; DELETE FROM ceilings; DELETE FROM devices;""")
con.commit()
con.close()
PY
fi
run all all

python3 - "$OUT" <<'PY'
import json, os, sqlite3, sys
out = sys.argv[1]
fails = []
def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)

def one(con, sql, *args):
    return con.execute(sql, args).fetchone()[0]

runs = {}
for name in ("cold", "all"):
    path = os.path.join(out, name + ".db")
    try:
        with open(os.path.join(out, name + ".json")) as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{name}: no summary ({e})")
        continue
    con = sqlite3.connect(path)
    runs[name] = (con, summary)
    print(f"== {name}: {summary['outcome']}, problems {summary['problems']}, evaluations"
          f" {summary['evaluations']}, {summary['seconds']['total']} s")
    if one(con, "PRAGMA integrity_check") != "ok":
        fail(f"{name}: integrity_check")
    if con.execute("PRAGMA foreign_key_check").fetchall():
        fail(f"{name}: foreign_key_check")
    gpus = summary.get("devices") or [{"index": 0, "gpu": summary["gpu"]}]
    if one(con, "SELECT count(*) FROM devices") != len(gpus):
        fail(f"{name}: {one(con, 'SELECT count(*) FROM devices')} devices rows for {len(gpus)} GPUs")
    # Every (variant, problem) of a key checked once: one check, or one a shape.
    dup = one(con, "SELECT count(*) FROM (SELECT gpu_id, variant_id, problem_id, batch, heads, seqlen_q,"
                   " seqlen_k, count(*) AS n FROM checks WHERE retired = 0"
                   " GROUP BY 1, 2, 3, 4, 5, 6, 7 HAVING n > 1)")
    if dup:
        fail(f"{name}: {dup} (variant, problem, shape) checked more than once on a key")
    bad = one(con, "SELECT count(*) FROM timings t WHERE NOT EXISTS (SELECT 1 FROM devices d"
                   " WHERE d.id = t.device_id AND d.gpu_id = t.gpu_id)")
    if bad:
        fail(f"{name}: {bad} timings name no device of their GPU")
    split = one(con, "SELECT count(*) FROM (SELECT gpu_id, problem_id FROM timings WHERE retired = 0"
                     " GROUP BY 1, 2 HAVING count(DISTINCT device_id) > 1)")
    if split:
        print(f"note: {name}: {split} problems timed on two devices (a GPU dropped out mid-problem?)")
    models = con.execute("SELECT g.id, g.name, (SELECT count(*) FROM (SELECT DISTINCT variant_id,"
                         " problem_id FROM checks c WHERE c.gpu_id = g.id AND c.retired = 0)),"
                         " (SELECT count(*) FROM winners w WHERE w.gpu_id = g.id),"
                         " (SELECT group_concat(d.device_index) FROM devices d WHERE d.gpu_id = g.id)"
                         " FROM gpus g ORDER BY g.id").fetchall()
    for gid, gname, pairs, winners, devs in models:
        print(f"   {gname} (GPU {devs}): {pairs} (variant, problem) pairs checked, {winners} winners")
        if summary["outcome"] == "done" and winners != summary["problems"]["total"]:
            fail(f"{name}: {gname}: {winners} winners for {summary['problems']['total']} problems")

if "cold" in runs and "all" in runs:
    cold, _ = runs["cold"]
    alls, _ = runs["all"]
    pairs = lambda con, gpu: one(con, "SELECT count(*) FROM (SELECT DISTINCT c.variant_id, c.problem_id"
                                      " FROM checks c JOIN gpus g ON g.id = c.gpu_id WHERE g.name = ?"
                                      " AND c.retired = 0)", gpu)
    wins = lambda con, gpu: {r[0]: r[1:] for r in con.execute(
        "SELECT p.direction || ' ' || p.dtype || ' d' || p.head_dim || ' ' || p.mask || ' s' ||"
        " p.seqlen_q, v.name, t.median_ms FROM winners w JOIN gpus g ON g.id = w.gpu_id"
        " JOIN problems p ON p.id = w.problem_id JOIN variants v ON v.id = w.variant_id"
        " JOIN timings t ON t.id = w.timing_id WHERE g.name = ? ORDER BY 1", (gpu,))}
    gpu = one(cold, "SELECT name FROM gpus ORDER BY id LIMIT 1")
    if pairs(cold, gpu) != pairs(alls, gpu):
        fail(f"{gpu}: {pairs(cold, gpu)} pairs checked by --gpu 0, {pairs(alls, gpu)} by --gpu all")
    a, b = wins(cold, gpu), wins(alls, gpu)
    print(f"== winners on {gpu}: --gpu 0 against --gpu all")
    for problem in sorted(set(a) | set(b)):
        wa, wb = a.get(problem), b.get(problem)
        if not wa or not wb:
            fail(f"{problem}: a winner in one run only")
            continue
        ratio = wb[1] / wa[1]
        mark = "same" if wa[0] == wb[0] else ("differs" if abs(ratio - 1) <= 0.03 else "DIFFERS > 3%")
        print(f"   {problem:28s} {wa[0].split('.')[-1]:22s} {wa[1]:8.4f} ms   "
              f"{wb[0].split('.')[-1]:22s} {wb[1]:8.4f} ms   x{ratio:.3f}  {mark}")
print(f"{len(fails)} failed; databases and logs in {out}")
sys.exit(1 if fails else 0)
PY
