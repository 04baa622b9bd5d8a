# s44 call 2 (issue 20): the ws90 backward at head dim 192 (two consumers,
# each a whole slab and half the middle one: products of N 64 and N 32 over
# its 96 columns), on the pack of this tree (build-gpu16, carry
# ["build-gpu16"]). Cut to what 270 s of device time left holds (failed
# starts took the rest):
# 1. test_gpu_bwd, ws90 d192, STATS_AHEAD 0 and DS_STSM 1, against the
#    fp64 reference: the half slab's MN-major B operand 64 bytes into
#    128-byte swizzled rows is the new thing to prove.
# 2. The d192 backward tuned cold, every family, bf16, none and causal,
#    s1024, 4096 and 16384 (6 problems; into a fresh database).
# Expected: ws90 d192 0.8-0.85x mma80's time (d256: 0.80-0.85x wgmma90's).
set -u
B=build-gpu16/build-gpu
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
. scripts/gpu_unpack.sh; gpu_unpack "$B" || exit 2
soname=$(grep -ao 'libfatune\.so\.[0-9]*' "$B/runtime/libfatune.so" | head -1)
[ -e "$B/runtime/$soname" ] || ln -s libfatune.so "$B/runtime/$soname"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
echo "== test_gpu_bwd ws90 d192 ($(date -u +%T))"
(cd "$B" && FATUNE_SOURCE_DIR="$ROOT" FATUNE_TEST_FAMILY=ws90 FATUNE_TEST_HEAD_DIM=192 FATUNE_TEST_PARAM="STATS_AHEAD=0 DS_STSM=1" \
  timeout 50 stdbuf -oL "$ROOT/$B/tests/test_gpu_bwd") > "$OUT/t_bwd.log" 2>&1
echo "rc $?"; grep -E "FAIL|passed|failed|error" "$OUT/t_bwd.log" | tail -12
echo "== tune bwd d192 bf16 ($(date -u +%T))"
timeout -s INT 80 "$B/fatune" --gpu 0 --db "$OUT/run.db" --direction bwd --head-dim 192 --dtype bf16 \
  --seqlen 1024,4096,16384 > "$OUT/tune.log" 2>&1
echo "rc $?"; tail -10 "$OUT/tune.log"
gzip -f "$OUT/run.db"; rm -f "$OUT"/run.db-*
echo "== done ($(date -u +%T))"
