# s33 call R: issue 22's proof of the shortcut -- the bf16 d128 forward
# default space tuned exhaustively and by successive halving, side by side.
set -u
PACK=build-gpu8/build-gpu
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
. scripts/gpu_unpack.sh; gpu_unpack "$PACK"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 560 python3 bench/tune_fast_vs_exhaustive.py --fatune $PACK/fatune --gpu 0 --head-dim 128 --out /tmp/fve -- --dtype bf16 > "$OUT/fve.log" 2>&1
echo "rc $?"; tail -40 "$OUT/fve.log"
cp /tmp/fve/*.json "$OUT/" 2>/dev/null; ls /tmp/fve
