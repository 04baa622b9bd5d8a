# s41 call 2 (any H100 or H200, <= 460 s), on the pack of the s41-kernels
# tree (build-gpu10: notes/patches/ws90-next-s.patch, kernel-log f31, and
# EXP_EMU, f32: of every 8 exponentials of the softmax, 2 or 4 as a cubic
# on the FMA pipe; STAGES 3, three K/V buffers as cuDNN's kernel holds).
# test_gpu_ws90 over NEXT_S 1 (bf16), EXP_EMU 2 (bf16, OVERLAP 2)
# and EXP_EMU 4 (e4m3) variants (FATUNE_TEST_PARAM is a substring of the
# sorted parameters), then two tunes (each variant checked on two shapes
# before it is timed, STAGES 3's only check here), each into its own
# database so that neither parameter's A/B sees the other's variants:
# NEXT_S without pingpong and EXP_EMU 0 (d64/d128, none/causal,
# s1024/s2048, STAGES 2), and EXP_EMU and STAGES with NEXT_S 0, OVERLAP 2
# and no pingpong (the shipped winners' schedule; d64/d128, none/causal,
# s1024/s4096); then bench/param_best.py of each.
#   carry ["build-gpu10"]
set -u -o pipefail
B=build-gpu10/build-gpu
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/call.log") 2>&1
. scripts/gpu_unpack.sh; gpu_unpack "$B" || exit 2
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
t() {  # name dtype param seconds
  echo "== test_gpu_ws90 $2 $3 ($(date -u +%T))"
  (cd "$B" && FATUNE_TEST_DTYPE=$2 FATUNE_TEST_PARAM="$3" timeout "$4" stdbuf -oL "$ROOT/$B/tests/test_gpu_ws90") \
    > "$OUT/t_$1.log" 2>&1
  echo "rc $?"; grep -E "FAIL|passed|failed" "$OUT/t_$1.log" | tail -4
}
if [ "${TESTS:-1}" = 1 ]; then  # TESTS=0: the tunes alone (their checks only), 120 s less
  t nexts bf16 "EXP_EMU=0 NEXT_S=1" 45
  t emu2 bf16 "EXP_EMU=2 NEXT_S=0 OVERLAP=2" 40
  t emu4 e4m3 "EXP_EMU=4 NEXT_S=0" 30
fi
C="--family ws90 --head-dim 64,128 --dtype bf16 --mask none,causal --timeout 20"
echo "== tune NEXT_S ($(date -u +%T))"
timeout -s INT "${T_NEXTS:-130}" "$B/fatune" --gpu 0 --db "$OUT/nexts.db" $C --seqlen 1024,2048 --param PINGPONG=0,EXP_EMU=0,STAGES=2 > "$OUT/tune_nexts.log" 2>&1
echo "rc $?"; tail -12 "$OUT/tune_nexts.log"
echo "== tune EXP_EMU ($(date -u +%T))"
timeout -s INT "${T_EMU:-165}" "$B/fatune" --gpu 0 --db "$OUT/emu.db" $C --seqlen 1024,4096 --param NEXT_S=0,OVERLAP=2,PINGPONG=0 > "$OUT/tune_emu.log" 2>&1
echo "rc $?"; tail -12 "$OUT/tune_emu.log"
echo "== A/B ($(date -u +%T))"
python3 bench/param_best.py "$OUT/nexts.db" --family ws90 --param NEXT_S --base 0 2>&1 | tee "$OUT/nexts_ab.log"
python3 bench/param_best.py "$OUT/emu.db" --family ws90 --param EXP_EMU --base 0 2>&1 | tee "$OUT/emu_ab.log"
python3 bench/param_best.py "$OUT/emu.db" --family ws90 --param STAGES --base 2 2>&1 | tee "$OUT/stages_ab.log"
for d in nexts emu; do gzip -f "$OUT/$d.db"; rm -f "$OUT/$d.db-wal" "$OUT/$d.db-shm"; done
bash scripts/fit_out.sh "$OUT" | tail -5
echo "== done ($(date -u +%T))"
