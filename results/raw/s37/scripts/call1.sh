# s37 call 1 (any GPU, <= 560 s): native1.sh (the binding's leftovers and
# the native host path's first run) into $OUT/n, bounded at 300 s; then
# s36's ord0.sh (the ordered ws90 backward's lean tune: bf16 d128 none and
# causal, s1024/4096, m64n128 DS_STSM=1, atomic and ordered, watchdog 20 s;
# param_best DQ_MODE; bench_runtime's deterministic column) into $OUT/o.
#   carry ["build-gpu9"]
set -u
OUT0=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT0/n"
OUT=$OUT0/n timeout 300 bash results/raw/s37/scripts/native1.sh 2>&1 | tail -60
echo "== ord0 ($(date -u +%T))"
OUT=$OUT0 bash results/raw/s36/scripts/ord0.sh 2>&1 | tail -50
bash scripts/fit_out.sh "$OUT0" | tail -12
