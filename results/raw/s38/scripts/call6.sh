# s38 call 6 (any GPU, <= 240 s): the stopping tree's GPU tests -- the
# native module (build, test_gpu_native with its shared capture()),
# test_gpu_runtime_context, test_gpu_bwd over the shipped DQ_SHIFT code's
# m64n128 DS_STSM=1 variants (def5c5f's template, restored in 16a95bd).
#   carry ["build-gpu9"]
set -u
OUT0=${OUT:-$PWD/gpu-out}
PACK=build-gpu9/build-gpu OUT=$OUT0 TESTS="runtime_context bwd:ws90" TEST_S=120 \
  TEST_PARAM="DQ_SHIFT=1 BLOCK_M=64 BLOCK_N=128 DS_STSM=1" \
  AFTER=results/raw/s38/scripts/call6_after.sh bash scripts/gpu_call.sh 2>&1 | tail -40
