# SPDX-License-Identifier: MIT
# Proves bench/store_peers.py stores a benchmark's peer timings honestly: on
# the fixture database of tests/test_report.c (FATUNE_KEEP_DB), a JSON of
# bench_runtime.py's shape stores each backend's time (the queued one where
# a row has it) and fatune's own against the matching problem row, skips
# and counts a row with no problem, a missing time and an untimed row, and
# says so in one exact line; a JSON of another GPU, a bad dtype or a file
# that is no benchmark's is refused by name with status 1 and nothing
# written; then the report's summary divides by the stored fatune time.
# Skips (77) without python3 and its sqlite3 module.
set -u
fatune=${1:?usage: test_store_peers.sh PATH/TO/fatune}
helper=$(dirname "$fatune")/tests/test_report
script=${FATUNE_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}/bench/store_peers.py
if ! python3 -c 'import sqlite3' 2>/dev/null; then
  echo "skipped: no python3 with sqlite3"
  exit 77
fi
work=$(mktemp -d /tmp/fatune_test_store_peers.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
rows() { python3 -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$work/fx.db" "$1"; }

FATUNE_KEEP_DB="$work/fx.db" "$helper" >"$work/helper.log" 2>&1 ||
  { cat "$work/helper.log" >&2; fail "fixture helper failed"; }
before=$(rows "SELECT count(*) FROM external_timings")

# fp16 none d64 s1024 (batch 16, heads 32) is a fixture problem: three
# rows, the queued times; d128 s2048 (8 x 16) too, without a FlashAttention
# time; the backward has no problem row; the fourth row was never timed.
cat >"$work/bench.json" <<'JSON'
{"gpu": "NVIDIA Fixture GPU", "rows": [
 {"direction": "fwd", "dtype": "fp16", "mask": "none", "head_dim": 64, "seqlen": 1024, "batch": 16,
  "heads": 32, "ms": {"fatune": 9.0, "flash": 9.0, "cudnn": 9.0},
  "ms_queued": {"fatune": 0.5, "flash": 0.75, "cudnn": 0.4}},
 {"dtype": "fp16", "mask": "none", "head_dim": 128, "seqlen": 2048, "batch": 8, "heads": 16,
  "ms": {"fatune": 1.0, "flash": null, "cudnn": 0.9}},
 {"direction": "bwd", "dtype": "fp16", "mask": "none", "head_dim": 64, "seqlen": 1024, "batch": 16,
  "heads": 32, "ms": {"fatune": 1.0, "flash": 1.0, "cudnn": 1.0}},
 {"direction": "fwd", "dtype": "fp16", "mask": "causal", "head_dim": 64, "seqlen": 1024,
  "batch": 16, "heads": 32, "status": "check failed"}
]}
JSON
out=$(python3 "$script" --db "$work/fx.db" "$work/bench.json" 2>&1) || fail "store_peers exited $?: $out"
want="store_peers: stored 5 timings; skipped: 3 with no problem row, 1 with no finite positive time, 1 rows the benchmark did not time"
[ "$out" = "$want" ] || fail "got '$out', want '$want'"
[ "$(rows "SELECT count(*) FROM external_timings")" -eq $((before + 5)) ] || fail "not 5 rows more"
got=$(rows "SELECT group_concat(source || '=' || median_ms, ' ') FROM (SELECT e.source, e.median_ms
            FROM external_timings e JOIN problems p ON p.id = e.problem_id WHERE p.head_dim = 64
            AND p.seqlen_q = 1024 AND e.id > (SELECT max(id) - 5 FROM external_timings) ORDER BY e.id)")
[ "$got" = "sdpa_flash=0.75 sdpa_cudnn=0.4 fatune_bench=0.5" ] || fail "stored '$got'"

# Refusals: status 1, a message naming the cause, nothing written.
refused() {  # JSON-TEXT WANT-MESSAGE
  printf '%s' "$1" >"$work/bad.json"
  n=$(rows "SELECT count(*) FROM external_timings")
  msg=$(python3 "$script" --db "$work/fx.db" "$work/bench.json" "$work/bad.json" 2>&1)
  st=$?
  [ "$st" -eq 1 ] || fail "status $st for $1"
  [ "$msg" = "$2" ] || fail "got '$msg', want '$2'"
  [ "$(rows "SELECT count(*) FROM external_timings")" -eq "$n" ] || fail "rows written for $1"
}
refused '{"gpu": "NVIDIA H100", "rows": []}' \
  "store_peers: no GPU named 'NVIDIA H100' in the database (it holds: NVIDIA Fixture GPU)"
refused '{"gpu": "NVIDIA Fixture GPU", "rows": [{"dtype": "fp32", "mask": "none", "ms": {}}]}' \
  "store_peers: $work/bad.json: row 1: dtype 'fp32' is none of fp16, bf16"
refused '[1, 2]' "store_peers: $work/bad.json: no 'rows' list: not a benchmark's JSON"

# The report divides the peers of d64 s1024 by fatune's 0.5 ms: the
# summary's FlashAttention-2 column now spans 0.97 (d128) to 1.50 (0.75 / 0.5).
"$fatune" report --db "$work/fx.db" -o "$work/r.html" >/dev/null 2>&1 || fail "report failed"
grep -q '<td>1.10× <span class="range">(0.97–1.50, 6)</span></td>' "$work/r.html" ||
  fail "the summary does not divide by the stored fatune time"
echo "test_store_peers: passed"
