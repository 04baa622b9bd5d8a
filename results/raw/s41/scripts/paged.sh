# s41 call 3 (H100, <= 420 s), on the pack of a tree with
# notes/patches/paged-shuffle-per-group.patch (kernel-log p7; with
# ws90-next-s.patch too, which leaves the paged family alone):
# test_gpu_paged over every paged variant, then every bf16 paged winner of
# the H100 table re-tuned (the patch stales them): s40 call 1's TUNE3 and
# TUNE4, call 2's TUNE1 and s41 call 1's batch-1 rows at 4096 keys, then
# bench_paged with the run's database as the user's.
#   carry ["build-gpu11"]
set -u
D="--head-dim 128 --timeout 20"
K="$D --dtype bf16 --family paged --seqlen-k 4096,32768,65536,131072 --paged 16,64,256"
PACK=build-gpu11/build-gpu TESTS="paged" TEST_S=70 TUNE_S=140 \
  TUNE1="$K --mask causal --seqlen 1,4,8,16 --gqa 4,8,1" \
  TUNE2="$K --mask none --seqlen 1,4,8,16 --gqa 4,8" \
  TUNE3="$D --family paged --dtype bf16 --mask none --seqlen 1 --gqa 1 --seqlen-k 4096,32768,65536,131072 --paged 16,64,256" \
  TUNE4="$D --family paged --dtype bf16 --mask none,causal --seqlen 1,4,8,16 --seqlen-k 4096 --batch 1 --paged 16,64,256 --gqa 4,8" \
  AFTER=results/raw/s41/scripts/paged_after.sh \
  bash scripts/gpu_call.sh 2>&1 | tail -100
