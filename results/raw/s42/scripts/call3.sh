# s42 call 3 (H100, <= 450 s), on the pack of the tree with the tuner's
# two default batches for a forward decoding problem (tuner/problems.c,
# fat_decoding_batches: the default, 16384 tokens / seqlen_k, and the one
# whose batch x K/V heads reaches 128): the contiguous decoding grid
# (splitkv, bf16 d128 none and causal, seqlen_q 1/4/8/16, seqlen_k
# 4096-131072, GQA 4/8) tuned cold without --batch, so at both; then
# bench_paged with the run's database as the user's (contiguous cells from
# its rows, paged ones from the shipped tables). Expected: batch 16, 32768
# keys, q4 and batch 8, 65536 keys, q16 back from 0.751/0.766 ms (s41, the
# batch-1 buckets' fixed splits) to ~0.70-0.71 (s40's SPLITS 0 winners).
#   carry ["build-gpu12"]
set -u
PACK=build-gpu12/build-gpu TUNE_S=330 \
  TUNE1="--head-dim 128 --timeout 20 --family splitkv --dtype bf16 --mask none,causal --seqlen 1,4,8,16 --seqlen-k 4096,32768,65536,131072 --gqa 4,8" \
  AFTER=results/raw/s41/scripts/paged_after.sh \
  bash scripts/gpu_call.sh 2>&1 | tail -60
