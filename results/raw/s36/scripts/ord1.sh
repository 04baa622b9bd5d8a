# s36 call "ord1" (any GPU): the ordered (deterministic) ws90 backward's
# first run (notes/kernel-log.md "ws13 built").
#  1. test_gpu_bwd over the ordered variants of one schedule family
#     (m64n128 / m128n128, two stages, stats ahead, stmatrix): bf16 d64/d128
#     on four shapes (odd lengths, empty causal rows, GQA), fp16 and d96 on
#     one, the local mask, PERSISTENT on more key blocks than SMs, GROUPED
#     on several pair groups; each ordered check run twice, bits compared.
#  2. the tuner as a test and a timer: bf16 d128, none and causal, s1024 /
#     4096 / 16384, every m64n128 DS_STSM=1 variant, atomic and ordered
#     (three check shapes each, ordered ones twice); watchdog 20 s.
#  3. after: bench/param_best.py DQ_MODE (ordered's best over atomic's, per
#     problem) and bench_runtime's deterministic column with FATUNE_DB=run.db.
# s35's next1.sh (the binding's tests) is the next call, warm.
set -u
ROOT=$PWD
OUT0=${OUT:-$PWD/gpu-out}
PACK=build-gpu9/build-gpu
nvidia-smi --query-gpu=name --format=csv,noheader
PACK=$PACK OUT=$OUT0/o TESTS="bwd:ws90" TEST_S=130 \
  TEST_PARAM="DQ_MODE=ordered STAGES=2 STATS_AHEAD=1 DS_STSM=1 BLOCK_N=128" \
  TUNE_S=200 TUNE1="--direction bwd --family ws90 --head-dim 128 --dtype bf16 --mask none,causal --seqlen 1024,4096,16384 --param BLOCK_M=64,BLOCK_N=128,DS_STSM=1 --timeout 20" \
  AFTER=results/raw/s36/scripts/ord1_after.sh bash scripts/gpu_call.sh
