# s40 call 3 (H100, <= 330 s), on a pack with the runtime's decoding
# buckets by parallelism (a bucket tuned at several batches serves the
# nearest batch x K/V heads) and the tables of calls 1-2 merged: the
# decoding grid's 4096-key problems tuned again at batch 1 (the tuner's
# default there is 4: 16384 tokens / 4096), contiguous (splitkv, bf16
# none and causal) and paged (16, 64, 256), then call3_after.sh:
# bench_paged with this run's database as the user's (its batch-1
# rows: the 4096-key cells), and ncu of the forward at s1024 against
# cuDNN (profile_fwd.sh; issue 19).
# Repack first (the pack must hold ecf48a0's runtime and tuner):
#   PACK_TESTS="paged worker reference features bwd runtime runtime_context" \
#     scripts/gpu_pack.sh build build-gpu9/build-gpu
#   carry ["build-gpu9"]
set -u
D="--head-dim 128 --timeout 20 --dtype bf16 --mask none,causal --seqlen 1,4,8,16 --seqlen-k 4096 --batch 1"
PACK=build-gpu9/build-gpu TUNE_S=120 \
  AFTER=results/raw/s40/scripts/call3_after.sh \
  TUNE1="$D --family splitkv --gqa 4,8" \
  TUNE2="$D --family paged --paged 16,64,256 --gqa 4,8" \
  bash scripts/gpu_call.sh 2>&1 | tail -150
