-- The "mma80" family: FlashAttention-2's forward pass on mma.sync m16n8k16
-- tensor cores (templates/fwd_mma80.cu), for sm_80 and every newer GPU.
-- This file is the whole tuning space of the family, in the spirit of
-- CLBlast's kernel settings: the parameter lists, the fixed default, and one
-- constraint per reason a configuration cannot work. The parameters change
-- speed, never results. See generator/API.md for the fields a family declares.

local constraints = fat.require("constraints")
local WARP_SIZE = 32          -- threads per warp
local ROWS_PER_MMA = 16       -- m16n8k16: one MMA covers 16 query rows
local MMA_K = 16              -- ... and consumes 16 elements of its reduction dim
local MMA_N = 8               -- ... producing 8 columns
local FLOATS_PER_TILE = 4     -- fp32 accumulators one thread holds of a 16x8 tile
local SMEM_ROW_PAD = 8        -- elements of padding per shared-memory row: conflict-free ldmatrix
local ELEMENT_BYTES = 2       -- fp16 and bf16
local ACCUMULATOR_BUDGET = 192 -- registers of 255; the rest hold fragments, addresses, softmax state
local WARP_ROWS = {[16] = true, [32] = true}  -- query rows one warp may own: one or two MMA row tiles
local DEEP_PIPELINE_MAX_BLOCK_N = 64          -- largest key tile worth 3 stages

local family = {
  name = "mma80",
  direction = "fwd",
  template = "fwd_mma80.cu",
  entry = "fat_fwd_mma80",
  archs = constraints.MMA_SYNC_ARCHS,
  head_dims = {32, 64, 96, 128, 192, 256},
  dtypes = {"fp16", "bf16"},
  masks = {"none", "causal", "local"},
  -- Enumerated in this order, first outermost; the name shows them as m<>n<>w<>s<>.
  params = {
    {name = "BLOCK_M", values = {64, 128}},          -- query rows per thread block
    -- 16 keeps head dim 256 at 12+ configurations under sm_80's 163 KiB.
    {name = "BLOCK_N", values = {16, 32, 64, 128}},  -- keys per K/V tile
    {name = "WARPS", values = {4, 8}},               -- warps per block, split over query rows
    {name = "STAGES", values = {1, 2, 3}},           -- K/V tiles in flight (cp.async depth)
  },
  -- One block per (query block, head), the keys walked by one block: the
  -- decoding schedules are family_splitkv.lua's.
  fixed = {PACK_GQA = 0, SPLITS = 1, PAGED = 0},
}

function family.tag(c)
  return ("m%dn%dw%ds%d"):format(c.BLOCK_M, c.BLOCK_N, c.WARPS, c.STAGES)
end

-- FlashAttention-2's fixed choice: the baseline tuning is measured against.
function family.default(head_dim)
  return {BLOCK_M = 128, BLOCK_N = 64, WARPS = head_dim <= 128 and 4 or 8, STAGES = 1}
end

-- Q tile plus STAGES buffers each of K and V, rows padded for ldmatrix.
-- Rows of whole 128-byte lines (head dims that are multiples of 64) are
-- swizzled, not padded (the template's kSwizzle). An fp8 K/V cache (the
-- decoding families' KV8 dtypes) keeps one widened 16-bit tile each of K
-- and V and STAGES byte tiles of each, rows of HEAD_DIM bytes unpadded.
function family.smem_bytes(c)
  local pitch = c.HEAD_DIM % 64 == 0 and c.HEAD_DIM or c.HEAD_DIM + SMEM_ROW_PAD
  if constraints.KV8_DTYPES[c.DTYPE] then
    return (c.BLOCK_M + 2 * c.BLOCK_N) * pitch * ELEMENT_BYTES + 2 * c.STAGES * c.BLOCK_N * c.HEAD_DIM
  end
  return (c.BLOCK_M + 2 * c.STAGES * c.BLOCK_N) * pitch * ELEMENT_BYTES
end

function family.resources(c)
  return {threads = WARP_SIZE * c.WARPS, block_m = c.BLOCK_M, smem_bytes = family.smem_bytes(c)}
end

-- Each constraint gets the configuration (params plus HEAD_DIM) and the
-- target ({arch, smem_limit}); it returns nil when satisfied, else the reason.
family.constraints = {
  -- Each warp owns whole 16-row MMA tiles of the query block.
  function(c)
    if c.BLOCK_M % (ROWS_PER_MMA * c.WARPS) ~= 0 then
      return ("BLOCK_M %d is not a multiple of 16*WARPS = %d"):format(c.BLOCK_M, ROWS_PER_MMA * c.WARPS)
    end
  end,
  -- The template keeps one or two row tiles per warp in registers, no more.
  function(c)
    local wm = c.BLOCK_M // c.WARPS
    if not WARP_ROWS[wm] then
      return ("rows per warp BLOCK_M/WARPS = %d is not 16 or 32"):format(wm)
    end
  end,
  -- P·V consumes keys 16 at a time (the MMA k-step).
  function(c)
    if c.BLOCK_N % MMA_K ~= 0 then
      return ("BLOCK_N %d is not a multiple of %d"):format(c.BLOCK_N, MMA_K)
    end
  end,
  -- Q·Kᵀ walks the head dimension 16 at a time (the MMA k-step).
  function(c)
    if c.HEAD_DIM % MMA_K ~= 0 then
      return ("head dim %d is not a multiple of %d"):format(c.HEAD_DIM, MMA_K)
    end
  end,
  -- The block must fit the shared memory one block may opt into.
  constraints.fits_shared_memory(family),
  -- fp32 accumulators of O (HEAD_DIM columns) and S (BLOCK_N columns) per
  -- thread; past the budget ptxas spills to local memory.
  function(c)
    local tiles = (c.BLOCK_M // c.WARPS) // ROWS_PER_MMA
    local acc = tiles * (c.HEAD_DIM // MMA_N * FLOATS_PER_TILE + c.BLOCK_N // MMA_N * FLOATS_PER_TILE)
    if acc > ACCUMULATOR_BUDGET then
      return ("accumulators %d > %d registers per thread"):format(acc, ACCUMULATOR_BUDGET)
    end
  end,
  -- Deep pipelines of large tiles only cost shared memory -- except for an
  -- fp8 K/V cache (the decoding families' dtypes), whose byte tiles are half
  -- the size and which needs the stages to keep as many bytes in flight.
  function(c)
    if c.STAGES >= 3 and c.BLOCK_N > DEEP_PIPELINE_MAX_BLOCK_N and not constraints.KV8_DTYPES[c.DTYPE] then
      return ("STAGES 3 needs BLOCK_N <= %d, not %d"):format(DEEP_PIPELINE_MAX_BLOCK_N, c.BLOCK_N)
    end
  end,
}

return family
