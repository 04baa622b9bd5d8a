# s35's call3.sh on the s36 pack (build-gpu9: the tables' ws90 backward variants were rehashed in 10eccb4, so s35's pack, whose generator predates it, would leave them out as stale).
# s35 call 3 (H200 only): the decoding tunes waiting since the 32nd -- the
# fp8 K/V cache (bf16-e4m3kv) and bf16, contiguous splitkv and paged 64, GQA
# 4 and 8, one to sixteen queries, 4096 to 131072 keys -- then the
# K/V-cache tests and bench_kv8 with the run's winners first.
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "GPU: $name"
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0;; esac
K="--head-dim 128 --mask causal --gqa 4,8 --seqlen 1,4,16 --seqlen-k 4096,32768,131072"
PACK=build-gpu9/build-gpu TESTS="paged" TEST_S=120 TUNE_S=90 \
  TUNE1="--dtype bf16-e4m3kv --family splitkv $K" TUNE2="--dtype bf16-e4m3kv --family paged --paged 64 $K" \
  TUNE3="--dtype bf16 --family splitkv $K" TUNE4="--dtype bf16 --family paged --paged 64 $K" \
  AFTER=results/raw/s35/scripts/after3.sh bash scripts/gpu_call.sh
