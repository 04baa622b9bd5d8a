/* The second parameter block of the forward variants that take one: those
 * that read K and V from a paged cache (the paged family) and those whose
 * key split count is chosen at launch (SPLITS 0). Like fat_abi.h it is
 * written in the common subset of C11 and CUDA C++: the host includes it
 * (after fat_abi.h), the generator inlines it into every source of
 * templates/fwd_mma80.cu.
 *
 * Design (issue 24: serving).
 *
 * Why a block of its own. fat_fwd_params is inside the source hash of
 * every variant tuned so far, and the shipped tables' winners are those
 * variants: a field added to it would change their machine code and stale
 * the tables until a GPU re-tune. So the launch data only new variants
 * need is this second kernel argument, which the variants that do not take
 * it never see; the switches in the template that add it are preprocessor
 * conditions and enumerators, off for every existing variant (NVRTC writes
 * a namespace-scope constexpr variable into the cubin, an enumerator not),
 * and `fatune rehash` proves the old variants' cubins byte for byte.
 *
 * Paged K/V (flash_attn_with_kvcache's block_table, vLLM's and
 * FlashInfer's pages): k and v are pools of pages, (pages, page_size,
 * heads_k, head_dim), fat_fwd_params' k/v batch strides stepping from one
 * page to the next and their row strides from one token of a page to the
 * next. Key j of sequence b is row j % page_size of page
 * block_table[b * block_table_stride + j / page_size].
 *
 * The page size is any power of two from FAT_FWD_PAGE_GROUP (16, vLLM's)
 * up (the public API takes 16 .. 65536; 64 and 256, FlashAttention-2's
 * least, alike): the kernels find a key's page by a shift and its row by a
 * mask, so a key tile may span pages and no page size is tied to a tile
 * size. Each 16-key group of a tile (the P·V product's k-step) lies in one
 * page, whose table entry one lane of each warp reads and hands to the
 * others' copies by a shuffle: a few bytes every block of a sequence reads
 * (L1 serves them), under the copies of the tiles in flight. The two other
 * choices measured worse on paper or in ptxas: pages a multiple of the key
 * tile (FlashAttention-2's) would serve neither vLLM's 16-token pages nor
 * the 64-key tiles with 16-token pages, and would make the page size a
 * compile-time parameter of each variant; a table read for every copied
 * row (which would take any page size, SGLang's single tokens too) made
 * ptxas hold one register a copy and spill (d192: 160 bytes).
 *
 * Each sequence's keys are its first seqused_k[b] (FlashAttention's
 * cache_seqlens), else seqlen_k; causal masks and windows align bottom-
 * right on those lengths and compare logical key positions, exactly as
 * for a contiguous cache. The table's entries for a sequence's used keys
 * must name pages of the pool: device data, read by the kernels only, the
 * caller's promise as cu_seqlens are; entries past them are never read.
 *
 * Splits chosen at launch: a variant of SPLITS 0 divides the key tiles of
 * a query block among `splits` blocks, the count the launch chooses for
 * the machine from the grid, the keys and the SM count (core/fwd_launch.c,
 * fat_fwd_launch_splits, which says the rule and its reason); its combine
 * kernel reads the same count, and a launch of one split writes O itself.
 * So a decoding variant tuned at batch 8 still fills the GPU at batch 1. */
#ifndef FAT_ABI_KV_H
#define FAT_ABI_KV_H

/* Bumped with every change to the layout below: the runtime launches a
 * stored variant that takes this block only if its source carries the
 * current line. */
#define FAT_ABI_KV_VERSION 1

/* The most splits a launch may choose: the combine kernel gives each split
 * one lane of a warp. */
#define FAT_FWD_MAX_LAUNCH_SPLITS 32

/* The fewest keys a page holds: a key tile's groups of this many keys
 * (the P·V product's k-step) each lie in one page, whose table entry one
 * lane reads for the warp. */
#define FAT_FWD_PAGE_GROUP 16

typedef struct fat_fwd_kv_params {
  const int *block_table;  /* paged: batch rows of block_table_stride page indices; 0 dense */
  int block_table_stride;  /* entries one sequence's row of block_table holds */
  int page_shift;          /* log2(page_size) */
  int splits;              /* SPLITS 0: the blocks the key tiles of one query block are divided
                              among (1 .. FAT_FWD_MAX_LAUNCH_SPLITS, fat_fwd_launch_splits);
                              the grid's z is batch x splits. A variant of fixed SPLITS
                              ignores it */
} fat_fwd_kv_params;

#endif
