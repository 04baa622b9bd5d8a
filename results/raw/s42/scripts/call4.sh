# s42 call 4. On an H200 (none lent since the twenty-fourth session's
# table; <= 240 s): the ws90 forward re-tune waiting since the thirty-
# second session, bf16 d128 (d64 left for lack of time), none and causal, seqlen 1024/4096 (16384 left for lack of time),
# then bench_sdpa.py of its winners against SDPA's FA2 and cuDNN backends
# (issue 19's table on its own GPU). On an H100 (<= 300 s), on the pack of b1631da (tables of fbd23db) (the lookup's
# nearest parallelism at or below the call's; the H100 table with the
# contiguous decoding grid at batch x K/V heads 128 too): test_gpu_runtime
# and test_gpu_paged, then bench_paged with an empty user database, so
# that the shipped tables serve every cell as they serve a user, and the
# variant each cell ran. Expected (call 3's tuned times): batch 4, 32768
# keys, q1 ~0.205 ms (call 3: 0.514, a one-split winner of parallelism
# 128 at 32); batch 8, 65536 keys, q16 ~0.71 (1.091); batch 16, 32768
# keys, q4 ~0.69 (s41's shipped table: 0.751).
#   carry ["build-gpu13"]
set -u
B=build-gpu13/build-gpu
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
. scripts/gpu_unpack.sh; gpu_unpack "$B" || exit 2
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1)
[ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
[ -f "$B/runtime/fatune_tables.db" ] || "$B/build_tables" "$B/runtime/fatune_tables.db" db/tables/*.sql > "$OUT/build_tables.log" 2>&1
echo "build_tables rc $? ($(grep -c '^stale' "$OUT/build_tables.log" 2>/dev/null) stale)"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
*H200*)
  echo "== tune ws90 ($(date -u +%T))"
  timeout -s INT 110 "$B/fatune" --gpu 0 --db "$OUT/run.db" --family ws90 --head-dim 128 --dtype bf16 \
    --mask none,causal --seqlen 1024,4096 > "$OUT/tune1.log" 2>&1
  echo "rc $?"; tail -16 "$OUT/tune1.log"
  echo "== bench_sdpa ($(date -u +%T))"
  PYTHONPATH=$ROOT/python FATUNE_LIB=$ROOT/$B/runtime/libfatune.so timeout 90 python3 bench/bench_sdpa.py \
    --db "$OUT/run.db" --seqlens 1024,4096 --head-dims 128 --out "$OUT/bench_sdpa.json" > "$OUT/bench_sdpa.log" 2>&1
  echo "rc $?"; tail -30 "$OUT/bench_sdpa.log"
  gzip -f "$OUT/run.db"; rm -f "$OUT"/run.db-*
  bash scripts/fit_out.sh "$OUT" | tail -3
  echo "== done ($(date -u +%T))"
  exit 0;;
esac
for t in runtime paged; do
  echo "== test_gpu_$t ($(date -u +%T))"
  (cd "$B" && FATUNE_SOURCE_DIR="$ROOT" timeout 60 stdbuf -oL "$ROOT/$B/tests/test_gpu_$t") > "$OUT/t_$t.log" 2>&1
  echo "rc $?"; grep -E "FAIL|passed|failed" "$OUT/t_$t.log" | tail -4
done
echo "== bench_paged, shipped tables ($(date -u +%T))"
mkdir -p "$OUT/b"
PYTHONPATH=$ROOT/python FATUNE_LIB=$ROOT/$B/runtime/libfatune.so FATUNE_DB=$OUT/empty.db \
  timeout 120 python3 bench/bench_paged.py --out "$OUT/b" > "$OUT/bench_paged.log" 2>&1
echo "rc $?"; cat "$OUT/b/bench_paged.md"
python3 - "$OUT/b/bench_paged.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["batch"], f'{r["heads"]}/{r["heads_k"]}', r["seqlen_k"], r["seqlen_q"],
          r["contiguous_variant"], r["paged16_variant"])
PY
rm -f "$OUT"/empty.db*
echo "== done ($(date -u +%T))"
