# s38 call 1 (any GPU, <= 480 s): s37's call 2, widened to d64 and fp16.
# test_gpu_runtime_context (host memory refused by name, dlse's gradients
# against their closed form); the ordered (deterministic) ws90 backward
# tuned for the H100 table's d128 and d64 problems, both dtypes, none and
# causal, s512-16384, m64n128 (every d64/d128 winner's tile), DQ_MODE=ordered
# only (merge keeps the atomic winners: they are faster); then
# s37's call2_after.sh: the host table, Python and native paths.
#   carry ["build-gpu9"]
set -u
OUT0=${OUT:-$PWD/gpu-out}
P="--direction bwd --family ws90 --dtype bf16,fp16 --mask none,causal --seqlen 512,1024,2048,4096,8192,16384 --timeout 20"
PACK=build-gpu9/build-gpu OUT=$OUT0 TESTS="runtime_context" TEST_S=60 TUNE_S=150 \
  AFTER=results/raw/s37/scripts/call2_after.sh \
  TUNE1="$P --head-dim 128 --param DQ_MODE=ordered,BLOCK_M=64,BLOCK_N=128,DS_STSM=1" \
  TUNE2="$P --head-dim 64 --param DQ_MODE=ordered,BLOCK_M=64,BLOCK_N=128" \
  bash scripts/gpu_call.sh 2>&1 | tail -80
