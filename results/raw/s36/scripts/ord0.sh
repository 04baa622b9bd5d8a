# s36 call "ord0" (any GPU): ord1.sh cut to a budget near its end -- no
# test_gpu_bwd (the tuner's checks are the test: three shapes a variant, an
# ordered one run twice and its bits compared), the tune of bf16 d128 none
# and causal at s1024 and s4096 (m64n128 DS_STSM=1, atomic and ordered),
# then ord1_after.sh (param_best DQ_MODE, failed checks, bench_runtime's
# deterministic column with FATUNE_DB=run.db).
set -u
ROOT=$PWD
OUT0=${OUT:-$PWD/gpu-out}
PACK=build-gpu9/build-gpu
nvidia-smi --query-gpu=name --format=csv,noheader
PACK=$PACK OUT=$OUT0/o TESTS="" \
  TEST_PARAM="DQ_MODE=ordered STAGES=2 STATS_AHEAD=1 DS_STSM=1 BLOCK_N=128" \
  TUNE_S=100 TUNE1="--direction bwd --family ws90 --head-dim 128 --dtype bf16 --mask none,causal --seqlen 1024,4096 --param BLOCK_M=64,BLOCK_N=128,DS_STSM=1 --timeout 20" \
  AFTER=results/raw/s36/scripts/ord1_after.sh bash scripts/gpu_call.sh
