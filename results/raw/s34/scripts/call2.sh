# s34 call 2: test_gpu_features with the backward's expected array name
# mended, then issue 22's proof of the shortcut with the drops -- the bf16
# d128 forward space tuned exhaustively and by the fast path, side by side.
set -u
PACK=build-gpu8/build-gpu
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
. scripts/gpu_unpack.sh; gpu_unpack "$PACK"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
(cd $PACK && FATUNE_SOURCE_DIR=$OLDPWD timeout 60 ./tests/test_gpu_features) > "$OUT/t_features.log" 2>&1
echo "features rc $?"; grep -E "check failed|passed" "$OUT/t_features.log" | tail -4
timeout 170 python3 bench/tune_fast_vs_exhaustive.py --fatune $PACK/fatune --gpu 0 --head-dim 128 --out /tmp/fve -- --dtype bf16 > "$OUT/fve.log" 2>&1
echo "rc $?"; tail -22 "$OUT/fve.log"
cp /tmp/fve/*.json "$OUT/" 2>/dev/null
