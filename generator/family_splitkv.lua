-- The "splitkv" family: the forward of templates/fwd_mma80.cu with the two
-- schedules of decoding, where few queries face a long K/V cache and one
-- block per (query block, head) cannot fill the GPU, nor keep its memory
-- system busy:
--   PACK_GQA  the query heads that share a K/V head become rows of one
--             block, so each K/V tile is read once for the whole group;
--   SPLITS    the key tiles of a query block are divided among SPLITS
--             blocks, whose fp32 partials a second kernel
--             (fat_fwd_mma80_combine) merges by their log-sum-exps; 0: as
--             many as the launch chooses for the GPU and the call
--             (core/fwd_launch.c, fat_fwd_launch_splits), so that a variant
--             tuned at batch 8 still fills the GPU at batch 1.
-- The tuner times this family only on problems with few queries
-- (tuner/tune.c: FAT_SPLITKV_MAX_SEQLEN_Q); the mma80 family competes there
-- too, so a split wins only where it is faster.

local constraints = fat.require("constraints")
local mma80 = fat.require("family_mma80")

local family = {
  name = "splitkv",
  direction = "fwd",
  template = "fwd_mma80.cu",
  entry = "fat_fwd_mma80",
  archs = constraints.MMA_SYNC_ARCHS,
  head_dims = mma80.head_dims,
  dtypes = {"fp16", "bf16"},
  masks = {"none", "causal", "local"},
  -- Enumerated in this order, first outermost; names show them as m<>n<>w<>s<>.g<>x<>.
  params = {
    {name = "BLOCK_M", values = {64}},            -- 4 warps of 16 rows: the smallest block
    {name = "BLOCK_N", values = {64, 128}},
    {name = "WARPS", values = {4}},
    {name = "STAGES", values = {2, 3}},           -- decoding is a stream of K/V: keep tiles in flight
    {name = "PACK_GQA", values = {0, 1}},
    {name = "SPLITS", values = {1, 4, 8, 16, 32, 0}},  -- last: the older ones keep their order
  },
  -- K and V contiguous: the paged cache is family_paged.lua's.
  fixed = {PAGED = 0},
}

function family.tag(c)
  return ("%s.g%dx%d"):format(mma80.tag(c), c.PACK_GQA, c.SPLITS)
end

-- No fixed choice to measure against: mma80's default is the baseline of
-- every problem this family is timed on.
function family.default()
  return {}
end

family.smem_bytes = mma80.smem_bytes

-- The launch of the combine kernel (when SPLITS > 1) and the grid (PACK_GQA)
-- follow from the parameter string: tuner/fwd_launch.c parses it.
function family.resources(c)
  return mma80.resources(c)
end

-- mma80's constraints, plus: a split of one is the unsplit schedule, which
-- only earns its place packed (unpacked, it is an mma80 configuration).
family.constraints = {}
for i, rule in ipairs(mma80.constraints) do family.constraints[i] = rule end
family.constraints[#family.constraints + 1] = function(c)
  if c.SPLITS == 1 and c.PACK_GQA == 0 then
    return "SPLITS 1 unpacked is the mma80 family's own schedule"
  end
end
-- The launch's split count (SPLITS 0) where its blocks do not spill: above
-- d128 they keep 96-128 accumulators of O and spill (sm_90a, NVRTC 13.0:
-- d192 24-176 bytes, as its fixed-split variants do; d256 without a mask 8);
-- the paged family serves those head dims with smaller key tiles.
local LAUNCH_SPLITS_MAX_HEAD_DIM = 128
family.constraints[#family.constraints + 1] = function(c)
  if c.SPLITS == 0 and c.HEAD_DIM > LAUNCH_SPLITS_MAX_HEAD_DIM then
    return ("SPLITS 0 above head dim %d: its blocks spill"):format(LAUNCH_SPLITS_MAX_HEAD_DIM)
  end
end

return family
