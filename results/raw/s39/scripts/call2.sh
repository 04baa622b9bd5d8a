# s39 call 2 (any GPU, <= 560 s): the paged decoding family's copies (kernel-log
# p5): each tile's block-table entries read a load ahead, and a copy's
# address from its group's shuffled base. test_gpu_paged over the paged
# variants; the H100 table's 249 bf16 paged problems re-tuned (causal: the
# full grid, 144; none: GQA 4 and 8, 96, and GQA 1 at one query, 12), then
# call2_after.sh: test_gpu_kvcache and bench_paged with the run's database
# as the user database (the contiguous column from the shipped tables), and
# ncu of one decoding step (results/raw/s39/scripts/decode_once.py).
#   carry ["build-gpu9"]
set -u
K="--head-dim 128 --dtype bf16 --seqlen-k 4096,32768,65536,131072 --paged 16,64,256 --timeout 20"
PACK=build-gpu9/build-gpu TESTS="paged" TEST_S=150 TUNE_S=170 \
  AFTER=results/raw/s39/scripts/call2_after.sh \
  TUNE1="$K --mask causal --seqlen 1,4,8,16 --gqa 4,8,1" \
  TUNE2="$K --mask none --seqlen 1,4,8,16 --gqa 4,8" \
  TUNE3="$K --mask none --seqlen 1 --gqa 1" \
  bash scripts/gpu_call.sh 2>&1 | tail -120
