-- The backward "mma80" family: FlashAttention-2's backward pass on mma.sync
-- m16n8k16 tensor cores (templates/bwd_mma80.cu), for sm_80 and every newer
-- GPU. One source holds four kernels (fat_bwd_preprocess, fat_bwd_mma80,
-- fat_bwd_dq, fat_bwd_convert_dq; tuner/fwd_job.h gives the launch order).
-- This file is the family's whole tuning space: parameter lists, the fixed
-- default, one constraint per reason a configuration cannot work. BLOCK_M,
-- BLOCK_N, WARPS and PREFETCH change speed, never results; DQ_MODE also
-- decides whether the gradients are bit-identical run to run ("separate" is).

local constraints = fat.require("constraints")
local WARP_SIZE = 32          -- threads per warp
local MMA_M = 16              -- m16n8k16: rows of one MMA tile, and its k-step
local MMA_N = 8               -- ... columns of one accumulator tile
local FLOATS_PER_TILE = 4     -- fp32 accumulators one thread holds of a 16x8 tile
local ROW_PAD = 8             -- elements of padding per shared-memory row: conflict-free ldmatrix
local SWIZZLE_DIM = 64        -- head dims that are multiples of this are swizzled instead of padded
local ELEMENT_BYTES = 2       -- fp16 and bf16
local FLOAT_BYTES = 4         -- lse and D of a query tile, staged as fp32
local ROW_STATS = 2           -- ... two of them (lse, D)
local ACCUMULATOR_BUDGET = 192 -- registers of 255; the rest hold fragments and addresses
-- At or below this many accumulators per thread ptxas keeps the key-block
-- kernel at <= 128 registers (58-135 seen for d64 and d128 on sm_90a,
-- NVRTC 13.0), so 16 or more warps share an SM and hide one another's loads:
-- a prefetch buffer there only costs shared memory.
local PREFETCH_MIN_ACCUMULATORS = 65

local family = {
  name = "mma80",
  direction = "bwd",
  template = "bwd_mma80.cu",
  entry = "fat_bwd_mma80",
  archs = constraints.MMA_SYNC_ARCHS,
  head_dims = {64, 96, 128, 192, 256},
  dtypes = {"fp16", "bf16"},
  masks = {"none", "causal", "local"},
  -- Enumerated in this order, first outermost; the name shows them as
  -- m<>n<>w<>.<mode>, with ".p1" appended when PREFETCH is 1.
  params = {
    {name = "BLOCK_M", values = {32, 64, 128}},  -- query rows per tile
    {name = "BLOCK_N", values = {32, 64, 128}},  -- keys per thread block (dK, dV rows)
    {name = "WARPS", values = {4, 8}},
    -- atomic: dQ summed in fp32 with atomicAdd by every key block (FlashAttention-2);
    -- separate: a second pass per query block, no atomics: deterministic.
    {name = "DQ_MODE", values = {"atomic", "separate"}},
    -- 1: the key-block kernel copies the next query tile's Q and dO (and
    -- loads its lse and D) while it computes the current one, in a second
    -- buffer; 0: it loads each tile just before computing it.
    {name = "PREFETCH", values = {0, 1}},
  },
  -- Dense batches without a soft-cap: family_bwd_mma80f.lua's variants take those.
  fixed = {FEATURES = 0},
}

-- PREFETCH=0 keeps the names the space had before the knob existed.
function family.tag(c)
  return ("m%dn%dw%d.%s%s"):format(c.BLOCK_M, c.BLOCK_N, c.WARPS, c.DQ_MODE, c.PREFETCH == 1 and ".p1" or "")
end

-- FlashAttention-2's choice of tiles for its backward (64 x 64), with
-- atomic dQ; twice the warps above d128, where dK and dV no longer fit four.
-- FA2 double-buffers Q and dO only in some of its configurations; the
-- default keeps the single buffer until the tuner has measured the second.
function family.default(head_dim)
  return {BLOCK_M = 64, BLOCK_N = 64, WARPS = head_dim <= 128 and 4 or 8, DQ_MODE = "atomic", PREFETCH = 0}
end

-- Elements a row of a Q, dO, K or V tile takes in shared memory: rows of
-- whole 128-byte lines are swizzled (the template's kSwizzleD), others padded.
local function pitch_d(head_dim)
  return head_dim % SWIZZLE_DIM == 0 and head_dim or head_dim + ROW_PAD
end

-- The key-block kernel: K, V (BLOCK_N rows), Q, dO (BLOCK_M rows; twice
-- with PREFETCH), P and dS (BLOCK_M x BLOCK_N), lse and D of the query tile.
local function smem_main(c)
  return (2 * c.BLOCK_N + 2 * c.BLOCK_M * (1 + c.PREFETCH)) * pitch_d(c.HEAD_DIM) * ELEMENT_BYTES
         + 2 * c.BLOCK_M * (c.BLOCK_N + ROW_PAD) * ELEMENT_BYTES
         + ROW_STATS * c.BLOCK_M * FLOAT_BYTES
end

-- The separate dQ pass: Q, dO, K, V, dS (BLOCK_M x BLOCK_N), lse and D.
local function smem_dq(c)
  return (2 * c.BLOCK_M + 2 * c.BLOCK_N) * pitch_d(c.HEAD_DIM) * ELEMENT_BYTES
         + c.BLOCK_M * (c.BLOCK_N + ROW_PAD) * ELEMENT_BYTES
         + ROW_STATS * c.BLOCK_M * FLOAT_BYTES
end

-- Every kernel of a variant is launched with this much (the largest need).
function family.smem_bytes(c)
  if c.DQ_MODE == "separate" then return math.max(smem_main(c), smem_dq(c)) end
  return smem_main(c)
end

-- block_m is the key block: grid.x of the main kernel is ceil(seqlen_k / BLOCK_N).
function family.resources(c)
  return {threads = WARP_SIZE * c.WARPS, block_m = c.BLOCK_N, smem_bytes = family.smem_bytes(c)}
end

-- How WARPS warps split an M x N product (templates/bwd_mma80.cu's
-- WarpSplit, which picks the grid with the fewest shared-memory loads):
-- nil when some grid of wm x (warps / wm) warps can, else why not.
local function split(what, m, n, warps)
  for wm = 1, warps do
    local wn = warps // wm
    if warps % wm == 0 and (m // MMA_M) % wm == 0 and n % (2 * MMA_N * wn) == 0 then return nil end
  end
  return ("%s: %d x %d does not split into whole 16 x 16 tiles over %d warps"):format(what, m, n, warps)
end

-- Atomic dQ (BLOCK_M x head dim) is summed in column slices no wider than
-- 2 x BLOCK_N (its accumulators then take at most the registers S's and dP's
-- did): the fewest passes whose slices are whole 16-column steps the warps
-- can split, as the template's dq_passes(); nil when there are none.
local function dq_passes(c)
  for passes = 1, c.HEAD_DIM // MMA_M do
    local cols = c.HEAD_DIM // passes
    if c.HEAD_DIM % passes == 0 and cols % MMA_M == 0 and cols <= 2 * c.BLOCK_N and
       not split("dQ", c.BLOCK_M, cols, c.WARPS) then
      return passes
    end
  end
end

-- fp32 accumulators per thread of an M x N product split over WARPS warps.
local function accumulators(m, n, warps)
  return m * n // (WARP_SIZE * warps)
end

-- Each constraint gets the configuration (params plus HEAD_DIM) and the
-- target ({arch, smem_limit}); it returns nil when satisfied, else the reason.
family.constraints = {
  -- Every product is made of whole MMA tiles, and the head dim is walked 16 at a time.
  function(c)
    if c.HEAD_DIM % MMA_M ~= 0 then
      return ("head dim %d is not a multiple of %d"):format(c.HEAD_DIM, MMA_M)
    end
  end,
  -- Atomic dQ is summed in column slices the warps split evenly.
  function(c)
    if c.DQ_MODE == "atomic" and not dq_passes(c) then
      return ("atomic dQ: no slice of head dim %d of at most %d columns splits over %d warps"):format(
        c.HEAD_DIM, 2 * c.BLOCK_N, c.WARPS)
    end
  end,
  -- The warps must split S (queries x keys) and dK/dV (keys x head dim) evenly ...
  function(c)
    return split("S", c.BLOCK_M, c.BLOCK_N, c.WARPS) or split("dK", c.BLOCK_N, c.HEAD_DIM, c.WARPS)
  end,
  -- ... and, for the separate dQ pass, S (queries x keys) and dQ (queries x head dim).
  function(c)
    if c.DQ_MODE == "separate" then
      return split("dQ pass S", c.BLOCK_M, c.BLOCK_N, c.WARPS) or
             split("dQ", c.BLOCK_M, c.HEAD_DIM, c.WARPS)
    end
  end,
  -- The block must fit the shared memory one block may opt into.
  constraints.fits_shared_memory(family),
  -- dK and dV live in registers for the whole kernel, beside S and dP of
  -- one query tile; past the budget ptxas spills to local memory.
  function(c)
    local acc = 2 * accumulators(c.BLOCK_N, c.HEAD_DIM, c.WARPS)
                + 2 * accumulators(c.BLOCK_N, c.BLOCK_M, c.WARPS)
    if acc > ACCUMULATOR_BUDGET then
      return ("accumulators %d > %d registers per thread"):format(acc, ACCUMULATOR_BUDGET)
    end
  end,
  -- Prefetching the next query tile pays only where few warps share an SM.
  function(c)
    if c.PREFETCH == 1 then
      local acc = 2 * accumulators(c.BLOCK_N, c.HEAD_DIM, c.WARPS) + 2 * accumulators(c.BLOCK_N, c.BLOCK_M, c.WARPS)
      if acc < PREFETCH_MIN_ACCUMULATORS then
        return ("prefetch: %d accumulators leave room for 16 warps per SM to hide the loads"):format(acc)
      end
    end
  end,
  -- The separate dQ pass holds dQ beside S and dP of one key tile.
  function(c)
    if c.DQ_MODE ~= "separate" then return nil end
    local acc = accumulators(c.BLOCK_M, c.HEAD_DIM, c.WARPS) + 2 * accumulators(c.BLOCK_M, c.BLOCK_N, c.WARPS)
    if acc > ACCUMULATOR_BUDGET then
      return ("dQ pass accumulators %d > %d registers per thread"):format(acc, ACCUMULATOR_BUDGET)
    end
  end,
}

return family
