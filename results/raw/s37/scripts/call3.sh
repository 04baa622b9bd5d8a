# s37 call 3 (any GPU, ~100 s; refused: too little budget left): call 2
# without its tune -- test_gpu_runtime_context (host memory refused by name
# for q and dlse, dlse's gradients against their closed form), then
# call2_after.sh's host table, Python and native paths.
#   carry ["build-gpu9"]
set -u
PACK=build-gpu9/build-gpu OUT=${OUT:-$PWD/gpu-out} TESTS="runtime_context" TEST_S=60 \
  AFTER=results/raw/s37/scripts/call2_after.sh bash scripts/gpu_call.sh 2>&1 | tail -40
cat "${OUT:-$PWD/gpu-out}/t_runtime_context.log" | tail -15
