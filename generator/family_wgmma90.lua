-- The "wgmma90" family: the forward on Hopper's warpgroup matrix products
-- (templates/fwd_wgmma90.cu, notes/wgmma-forward.md), sm_90a only. Its
-- layouts are checked by tests/test_gpu_wgmma.c. Its tiles are whole
-- 64-column slabs: head dims 64, 128, 192 and 256, and 96 on the 128-column
-- template (columns past the head dim load as zeros and are never stored,
-- as for any head dim a call pads up to a tuned one); dense and
-- variable-length batches, GQA, windows and the soft-cap as mma80 has them,
-- no decoding schedules.

local constraints = fat.require("constraints")
local tiles = fat.require("wgmma_tiles")
local family = {
  name = "wgmma90",
  direction = "fwd",
  template = "fwd_wgmma90.cu",
  entry = "fat_fwd_wgmma90",
  archs = {"sm_90a"},
  head_dims = {64, 96, 128, 192, 256},
  dtypes = {"fp16", "bf16"},
  masks = {"none", "causal", "local"},
  params = {
    {name = "BLOCK_M", values = {64, 128}},   -- query rows per block: 64 per warpgroup
    {name = "BLOCK_N", values = {64, 128}},   -- keys per K/V tile: S's N
    {name = "STAGES", values = {1, 2}},       -- K/V tiles in flight
    {name = "OVERLAP", values = {0, 1}},      -- softmax of tile j + 1 beside P·V of tile j
  },
  fixed = {PACK_GQA = 0, SPLITS = 1},
}

function family.tag(c)
  return ("m%dn%ds%d%s"):format(c.BLOCK_M, c.BLOCK_N, c.STAGES, c.OVERLAP == 1 and "o" or "")
end

family.template_head_dim = tiles.template_head_dim

-- No fixed choice of its own: mma80's default (FlashAttention-2's tiles) is
-- the baseline of every problem, this family's variants among the contenders.
function family.default()
  return {}
end

-- Q, STAGES K and V tiles, unpadded (swizzled), and the alignment slack.
function family.smem_bytes(c)
  return (c.BLOCK_M + 2 * c.STAGES * c.BLOCK_N) * tiles.template_head_dim(c.HEAD_DIM) * tiles.ELEMENT_BYTES +
         tiles.ALIGNMENT_SLACK
end

function family.resources(c)
  return {threads = tiles.THREADS_PER_WARPGROUP * c.BLOCK_M // tiles.ROWS_PER_WARPGROUP, block_m = c.BLOCK_M,
          smem_bytes = family.smem_bytes(c)}
end

family.constraints = {
  constraints.fits_shared_memory(family),
  function(c)
    if c.OVERLAP == 1 and c.STAGES ~= 2 then return "OVERLAP keeps two K/V buffers: STAGES 2" end
  end,
}

return family
