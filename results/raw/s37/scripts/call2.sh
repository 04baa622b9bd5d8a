# s37 call 2 (any GPU, <= 300 s): the ordered (deterministic) ws90 backward
# tuned for the shipped table's d128 problems, so that its deterministic
# picks (export: the fastest deterministic variant with a full timing) can
# be ws90's ordered variants instead of mma80's separate dQ pass: bf16 (fp16 next:
# the budget), none and causal, s512-16384, m64n128 DS_STSM=1 (every d128 winner's
# tile), DQ_MODE=ordered only (the table's atomic winners stay: merge
# replaces a winner only when clearly beaten, and ordered ones are slower),
# watchdog 20 s. Then call2_after.sh: the host table, both paths.
# First test_gpu_runtime_context (host memory refused by name, dlse's
# gradients against their closed form). Not run in the 37th session (no
# device time left): the next session's first call.
#   carry ["build-gpu9"]
set -u
OUT0=${OUT:-$PWD/gpu-out}
PACK=build-gpu9/build-gpu OUT=$OUT0 TESTS="runtime_context" TEST_S=60 TUNE_S=180 \
  AFTER=results/raw/s37/scripts/call2_after.sh TUNE1="--direction bwd --family ws90 --head-dim 128 --dtype bf16 --mask none,causal --seqlen 512,1024,2048,4096,8192,16384 --param DQ_MODE=ordered,BLOCK_M=64,BLOCK_N=128,DS_STSM=1 --timeout 20" \
  bash scripts/gpu_call.sh 2>&1 | tail -60
