# s38 call 4 (any GPU, <= 480 s): ws16 (DQ_SHIFT for causal; ws15's writer
# reverted: the shifted variants without a mask are call 2's code again).
# test_gpu_bwd over the m64n128 DS_STSM=1 STATS_AHEAD=0 DQ_SHIFT=1 variants
# (causal and none, d64/d96/d128); the tune of bf16 d128 causal s512-16384
# over every m64n128 DS_STSM=1 variant of each mode (one run, side by side);
# every m64n128 DS_STSM=1 DQ_SHIFT=1 variant, none and causal, bf16/fp16,
# d64/d128, s512-16384 (for the table's deterministic picks); then
# call4_after.sh: each mode's best a problem, bench_runtime's deterministic
# column on this database.
#   carry ["build-gpu9"]
set -u
OUT0=${OUT:-$PWD/gpu-out}
P="--direction bwd --family ws90 --seqlen 512,1024,2048,4096,8192,16384 --timeout 20"
PACK=build-gpu9/build-gpu OUT=$OUT0 TESTS="bwd:ws90" TEST_S=200 TUNE_S=150 \
  TEST_PARAM="DQ_SHIFT=1 BLOCK_M=64 BLOCK_N=128 DS_STSM=1 STATS_AHEAD=0" \
  AFTER=results/raw/s38/scripts/call4_after.sh \
  TUNE1="$P --mask causal --head-dim 128 --dtype bf16 --param BLOCK_M=64,BLOCK_N=128,DS_STSM=1" \
  TUNE2="$P --mask none,causal --head-dim 128,64 --dtype bf16,fp16 --param DQ_SHIFT=1,BLOCK_M=64,BLOCK_N=128,DS_STSM=1" \
  bash scripts/gpu_call.sh 2>&1 | tail -100
