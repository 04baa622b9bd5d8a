# s40 call 1 (H100, <= 420 s): notes/patches/splitkv-combine.patch and
# paged-kv8-copies-combine.patch applied (kernel-log p6: the launch-chosen
# splits' combine, chunked loads; the fp8 cache's paged copies' table reads
# a load ahead). test_gpu_paged over every paged variant, then the H100
# table's retired problems re-tuned: the contiguous SPLITS 0 grids (55
# winners came from them) and the bf16 paged grids of GQA 4 and 8 (and
# causal GQA 1). Call 2 tunes the rest (paged none GQA 1, the fp8 caches'
# paged problems) over this call's database, then tests and benches.
#   carry ["build-gpu9"]
set -u
D="--head-dim 128 --timeout 20"
K="$D --dtype bf16 --family paged --seqlen-k 4096,32768,65536,131072 --paged 16,64,256"
PACK=build-gpu9/build-gpu TESTS="paged" TEST_S=70 TUNE_S=140 \
  TUNE1="$D --family splitkv --param SPLITS=0 --dtype bf16 --mask none,causal --seqlen 1,4,8,16 --seqlen-k 4096,32768,65536,131072 --gqa 4,8" \
  TUNE2="$D --family splitkv --param SPLITS=0 --dtype fp16,bf16-e4m3kv,fp16-e4m3kv --mask causal --seqlen 1,4,16 --seqlen-k 4096,32768,131072 --gqa 4,8" \
  TUNE3="$K --mask causal --seqlen 1,4,8,16 --gqa 4,8,1" \
  TUNE4="$K --mask none --seqlen 1,4,8,16 --gqa 4,8" \
  bash scripts/gpu_call.sh 2>&1 | tail -140
