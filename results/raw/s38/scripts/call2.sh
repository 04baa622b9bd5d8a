# s38 call 2 (any GPU, <= 560 s): DQ_SHIFT's first run (notes/kernel-log.md
# ws14). test_gpu_bwd over the m64n128 DS_STSM=1 DQ_SHIFT=1 variants (d64,
# d96, d128; bf16 on every shape, the persistent "many" one and the shape
# whose pairs a round of 132 splits, each ordered one run twice and its bits
# compared); the tune of bf16 d128 none s512-16384 over m64n128 DS_STSM=1 in
# every mode (atomic, ordered, ordered shifted: one run, side by side); the
# shifted variants alone for fp16 d128 and bf16/fp16 d64 (their plain
# ordered and atomic ones are in call 1's database and the table); then
# call2_after.sh (each problem's best of each mode, bench_runtime's
# deterministic column on this database).
#   carry ["build-gpu9"]
set -u
OUT0=${OUT:-$PWD/gpu-out}
P="--direction bwd --family ws90 --mask none --seqlen 512,1024,2048,4096,8192,16384 --timeout 20"
PACK=build-gpu9/build-gpu OUT=$OUT0 TESTS="bwd:ws90" TEST_S=200 TUNE_S=120 \
  TEST_PARAM="DQ_SHIFT=1 BLOCK_M=64 BLOCK_N=128 DS_STSM=1" \
  AFTER=results/raw/s38/scripts/call2_after.sh \
  TUNE1="$P --head-dim 128 --dtype bf16 --param BLOCK_M=64,BLOCK_N=128,DS_STSM=1" \
  TUNE2="$P --head-dim 128,64 --dtype fp16,bf16 --param DQ_SHIFT=1,BLOCK_M=64,BLOCK_N=128" \
  bash scripts/gpu_call.sh 2>&1 | tail -90
