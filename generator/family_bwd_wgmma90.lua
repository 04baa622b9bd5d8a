-- The backward "wgmma90" family: FlashAttention's backward on Hopper's
-- warpgroup matrix products (templates/bwd_wgmma90.cu), sm_90a only. Its
-- kernels are named as mma80's (tuner/fwd_job.h gives the launch order);
-- dQ is summed with atomics only, so the deterministic mode stays with
-- mma80's separate pass. dK and dV of a warpgroup's 64 keys live in
-- registers for the whole kernel (a head dim's worth of accumulators each);
-- past head dim 128 two warpgroups share the keys, each holding half the
-- columns (the template's kDSplit). 96 runs on the 128-column template
-- (zero columns, never stored); 192 would split into halves of one and a
-- half slabs, which the template's descriptors do not address.

local constraints = fat.require("constraints")
local tiles = fat.require("wgmma_tiles")
local KEYS_PER_WARPGROUP = tiles.ROWS_PER_WARPGROUP  -- every product's rows are a warpgroup's keys
local FLOAT_BYTES = 4
local ROW_STATS = 2             -- lse and D of the query tile
-- Accumulators a thread may hold at once: Sᵀ and dPᵀ (BLOCK_M / 2 each)
-- beside dK and dV (head dim / 2 each); the rest of the 255 registers hold
-- addresses and the A fragments.
local ACCUMULATOR_BUDGET = 192
-- A thread's 255 registers: at most 65536 / 255 threads a block, rounded
-- down to whole warpgroups.
local MAX_THREADS = 256
local SPLIT_ABOVE = 128         -- head dims past it split dK and dV over two warpgroups

local family = {
  name = "wgmma90",
  direction = "bwd",
  template = "bwd_wgmma90.cu",
  entry = "fat_bwd_wgmma90",
  archs = {"sm_90a"},
  head_dims = {64, 96, 128, 256},
  dtypes = {"fp16", "bf16"},
  masks = {"none", "causal", "local"},
  params = {
    {name = "BLOCK_M", values = {64, 128}},  -- query rows per tile: Sᵀ's N
    {name = "BLOCK_N", values = {64, 128}},  -- keys per thread block, 64 per warpgroup
    {name = "STAGES", values = {1, 2}},      -- query tiles in flight
    -- dQ summed with atomics (one value: named so the launcher reads it
    -- as it reads mma80's)
    {name = "DQ_MODE", values = {"atomic"}},
  },
}

function family.tag(c)
  return ("m%dn%ds%d"):format(c.BLOCK_M, c.BLOCK_N, c.STAGES)
end

family.template_head_dim = tiles.template_head_dim

-- Warpgroups sharing one group of 64 keys (the template's kDSplit).
local function d_split(c)
  return tiles.template_head_dim(c.HEAD_DIM) > SPLIT_ABOVE and 2 or 1
end

-- No fixed choice of its own: mma80's default is every problem's baseline.
function family.default()
  return {}
end

-- K and V (BLOCK_N rows), STAGES Q and dO tiles (BLOCK_M rows), dSᵀ
-- (BLOCK_N x BLOCK_M) and where the warpgroups split Pᵀ beside it, the
-- tile's lse and D, and the alignment slack.
function family.smem_bytes(c)
  local d = tiles.template_head_dim(c.HEAD_DIM)
  return (2 * c.BLOCK_N + 2 * c.STAGES * c.BLOCK_M) * d * tiles.ELEMENT_BYTES +
         (d_split(c) > 1 and 2 or 1) * c.BLOCK_N * c.BLOCK_M * tiles.ELEMENT_BYTES +
         ROW_STATS * c.BLOCK_M * FLOAT_BYTES + tiles.ALIGNMENT_SLACK
end

local function threads(c)
  return tiles.THREADS_PER_WARPGROUP * c.BLOCK_N // KEYS_PER_WARPGROUP * d_split(c)
end

-- block_m is the key block: grid.x of the main kernel is ceil(seqlen_k / BLOCK_N).
function family.resources(c)
  return {threads = threads(c), block_m = c.BLOCK_N, smem_bytes = family.smem_bytes(c)}
end

family.constraints = {
  constraints.fits_shared_memory(family),
  function(c)
    local acc = c.BLOCK_M + tiles.template_head_dim(c.HEAD_DIM) // d_split(c)
    if acc > ACCUMULATOR_BUDGET then
      return ("accumulators %d > %d registers per thread"):format(acc, ACCUMULATOR_BUDGET)
    end
  end,
  function(c)
    if threads(c) > MAX_THREADS then
      return ("%d threads leave fewer than 255 registers each"):format(threads(c))
    end
  end,
  -- dQ (BLOCK_M x head dim) goes to the warpgroups in 64-row blocks; where
  -- there are more warpgroups than blocks, each takes a column slice, which
  -- must be whole 64-column slabs of K.
  function(c)
    local warpgroups, row_blocks = threads(c) // tiles.THREADS_PER_WARPGROUP, c.BLOCK_M // KEYS_PER_WARPGROUP
    local d = tiles.template_head_dim(c.HEAD_DIM)
    if warpgroups > row_blocks and d // (warpgroups // row_blocks) % tiles.SLAB ~= 0 then
      return ("dQ: %d warpgroups split %d columns into slices narrower than a slab"):format(warpgroups, d)
    end
  end,
}

return family
