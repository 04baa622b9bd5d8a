# s40 call 2 (H100, <= 300 s), over call 1's database (carried as
# build-gpu9/run1.db.gz): the rest of the retired paged problems (bf16 none
# GQA 1 at one query; the fp8 caches' page-64 grid), then
# results/raw/s39/scripts/call3_after.sh with the run's database as the
# user's: test_gpu_kvcache, bench_paged, ncu of one decoding step; and
# bench_kv8 (the fp8 cache's paged copies).
#   carry ["build-gpu9"]
set -u
D="--head-dim 128 --timeout 20"
PACK=build-gpu9/build-gpu DB_IN=build-gpu9/run1.db.gz TUNE_S=120 \
  AFTER=results/raw/s40/scripts/call2_after.sh \
  TUNE1="$D --family paged --dtype bf16 --mask none --seqlen 1 --gqa 1 --seqlen-k 4096,32768,65536,131072 --paged 16,64,256" \
  TUNE2="$D --family paged --paged 64 --dtype bf16-e4m3kv,fp16-e4m3kv --mask causal --seqlen 1,4,16 --seqlen-k 4096,32768,131072 --gqa 4,8" \
  bash scripts/gpu_call.sh 2>&1 | tail -150
