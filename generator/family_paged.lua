-- The "paged" family: the forward of templates/fwd_mma80.cu reading K and
-- V from a paged cache through a block table (PAGED, fat_abi_kv.h), as
-- serving systems keep them (vLLM, SGLang, FlashInfer; FlashAttention's
-- flash_attn_with_kvcache). Decoding and chunked prefill alike: a few
-- queries or a chunk of them against a long cache, in pages of any power
-- of two tokens, in any order. Its variants serve paged calls only and
-- paged calls only they (core/family.c: paged), tuned on paged problems
-- (fatune --paged PAGE_SIZE), each a key of its own.
--   BLOCK_M   64, the decoding tile (packed with a group's query heads),
--             or 128, a prefill chunk's;
--   PACK_GQA  the query heads that share a K/V head as rows of one block;
--   SPLITS    0 only: the launch divides the key tiles among as many
--             blocks as fill the GPU for the call (core/fwd_launch.c,
--             fat_fwd_launch_splits; one for a long chunk), whose partials
--             fat_fwd_mma80_combine merges.

local constraints = fat.require("constraints")
local mma80 = fat.require("family_mma80")
local splitkv = fat.require("family_splitkv")

local DECODE_BLOCK_M = 64  -- splitkv's block: the rows a decoding step packs
local ROWS_PER_WARP = 16   -- one m16n8k16 row tile
local SMALL_TILE_MIN_HEAD_DIM = 192  -- BLOCK_N 32 only from here (below)
local WARP_SIZE = 32
local CHUNK_ELEMENTS = 8   -- a 16-byte copy of 2-byte elements
local MMA_N = 8            -- columns of an m16n8k16 product
local FLOATS_PER_TILE = 4  -- fp32 accumulators one thread holds of a 16x8 tile
-- Registers a thread of a paged block holds for its accumulators and for
-- the address (two registers) of each copy it issues for a key tile, at
-- most: measured, ptxas (sm_90a, NVRTC 13.0) spilled at 192 and 208 (d256
-- and d192, BLOCK_M 64 on 4 warps with 64 and 128 keys) and not at 176
-- (d256, BLOCK_M 128 on 8 warps) or below.
local REGISTER_BUDGET = 176

local family = {
  name = "paged",
  direction = "fwd",
  template = "fwd_mma80.cu",
  entry = "fat_fwd_mma80",
  archs = constraints.MMA_SYNC_ARCHS,
  head_dims = mma80.head_dims,
  dtypes = {"fp16", "bf16", "fp16-e4m3kv", "bf16-e4m3kv"},  -- *-e4m3kv: an fp8 cache, sm_89 on
  masks = {"none", "causal", "local"},
  -- Enumerated in this order, first outermost; names show them as m<>n<>w<>s<>.g<>x<>.
  params = {
    {name = "BLOCK_M", values = {64, 128}},
    {name = "BLOCK_N", values = {32, 64, 128}},   -- 32: above d128 (below)
    {name = "WARPS", values = {4, 8}},            -- one 16-row tile a warp (below)
    {name = "STAGES", values = {2, 3, 4, 6}},     -- a stream of pages: keep tiles in flight
                                                  -- (4 and 6: an fp8 cache's, constraints.lua)
    {name = "PACK_GQA", values = {0, 1}},
    {name = "SPLITS", values = {0}},              -- chosen at launch
  },
  fixed = {PAGED = 1},
}

family.tag = splitkv.tag

-- The runtime's built-in default for a paged call (no tuned winner): the
-- decoding tile, unpacked (it serves every group size), two stages, and
-- the key tile the register budget leaves (32 above d128); packed for an
-- fp8 cache (splitkv's default says why).
function family.default(head_dim, dtype)
  return {BLOCK_M = DECODE_BLOCK_M, BLOCK_N = head_dim < SMALL_TILE_MIN_HEAD_DIM and 64 or 32, WARPS = 4,
          STAGES = 2, PACK_GQA = constraints.KV8_DTYPES[dtype] and 1 or 0, SPLITS = 0}
end

-- Copies of 16 bytes a thread issues for one key tile of K (or V): each
-- walks a column chunk down the rows, rows_per_pass rows at a time.
local function copies_per_thread(c)
  local rows_per_pass = (WARP_SIZE * c.WARPS) // (c.HEAD_DIM // CHUNK_ELEMENTS)
  return (c.BLOCK_N + rows_per_pass - 1) // rows_per_pass
end

family.smem_bytes = mma80.smem_bytes

function family.resources(c)
  return mma80.resources(c)
end

-- mma80's constraints, plus four.
family.constraints = {}
for i, rule in ipairs(mma80.constraints) do family.constraints[i] = rule end
-- A block of 128 rows is a prefill chunk's, where a group's heads are
-- blocks of their own (packing them serves the few queries of a decoding
-- step).
family.constraints[#family.constraints + 1] = function(c)
  if c.PACK_GQA == 1 and c.BLOCK_M ~= DECODE_BLOCK_M then
    return ("PACK_GQA 1 is for decoding's BLOCK_M %d, not %d"):format(DECODE_BLOCK_M, c.BLOCK_M)
  end
end
-- One 16-row tile a warp: with two, the accumulators leave no registers
-- for the addresses of the paged copies (d128 BLOCK_M 128 on 4 warps
-- spilled 104 bytes on sm_90a).
family.constraints[#family.constraints + 1] = function(c)
  if c.BLOCK_M // c.WARPS ~= ROWS_PER_WARP then
    return ("rows per warp BLOCK_M/WARPS = %d is not %d"):format(c.BLOCK_M // c.WARPS, ROWS_PER_WARP)
  end
end
-- The accumulators of a warp's 16 rows (O's head-dim columns, S's key
-- columns) and two registers for each copy's address fit the budget;
-- beyond it ptxas spills.
family.constraints[#family.constraints + 1] = function(c)
  local acc = c.HEAD_DIM // MMA_N * FLOATS_PER_TILE + c.BLOCK_N // MMA_N * FLOATS_PER_TILE
  local regs = acc + 2 * copies_per_thread(c)
  if regs > REGISTER_BUDGET then
    return ("registers: %d accumulators + 2 x %d copies > %d"):format(acc, copies_per_thread(c), REGISTER_BUDGET)
  end
end
family.constraints[#family.constraints + 1] = constraints.fp8_conversion
family.constraints[#family.constraints + 1] = constraints.deep_stages_fp8_only
-- A key tile of 32 costs twice the loop's barriers a key: only where 64
-- keys do not fit the budget (head dims above 128).
family.constraints[#family.constraints + 1] = function(c)
  if c.BLOCK_N < 64 and c.HEAD_DIM < SMALL_TILE_MIN_HEAD_DIM then
    return ("BLOCK_N %d is for head dims of %d and above"):format(c.BLOCK_N, SMALL_TILE_MIN_HEAD_DIM)
  end
end

return family
