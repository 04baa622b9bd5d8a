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
-- Its dtypes include an fp8 K/V cache's (fp16-e4m3kv, bf16-e4m3kv: K and V
-- e4m3, widened in the kernel; sm_89 and newer), which only it and the
-- paged family generate.
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
  dtypes = {"fp16", "bf16", "fp16-e4m3kv", "bf16-e4m3kv"},
  masks = {"none", "causal", "local"},
  -- Enumerated in this order, first outermost; names show them as m<>n<>w<>s<>.g<>x<>.
  params = {
    {name = "BLOCK_M", values = {64}},            -- 4 warps of 16 rows: the smallest block
    {name = "BLOCK_N", values = {64, 128, 32}},   -- 32: an fp8 cache's above d128 (below)
    {name = "WARPS", values = {4}},
    {name = "STAGES", values = {2, 3, 4, 6}},     -- decoding is a stream of K/V: keep tiles in flight
                                                  -- (4 and 6: an fp8 cache's, below)
    {name = "PACK_GQA", values = {0, 1}},
    {name = "SPLITS", values = {1, 4, 8, 16, 32, 0}},  -- last: the older ones keep their order
  },
  -- K and V contiguous: the paged cache is family_paged.lua's.
  fixed = {PAGED = 0},
}

function family.tag(c)
  return ("%s.g%dx%d"):format(mma80.tag(c), c.PACK_GQA, c.SPLITS)
end

-- The runtime's built-in default for a decoding call with no tuned winner
-- (runtime/select.c: a contiguous call whose grid the launch would split,
-- fat_rt_decoding_call): the launch's splits over the packed decoding tile
-- (a group's query heads read each K/V tile once: the first H100 tune's
-- packed winners were 2.3-3.6x the unpacked tile at GQA 4; a group of one
-- packs as itself), two stages. An fp8 K/V cache's serves every contiguous
-- call of its dtype (mma80 does not read the cache), its key tile the one
-- whose block fits sm_89's shared memory and does not spill (32 above
-- d128); a 16-bit dtype's only up to d128, where the launch's splits have
-- a tile that does not spill (the rule on LAUNCH_SPLITS_MAX_HEAD_DIM
-- below): above, mma80's default serves. Marked default, the tuner times
-- it in full (never dropped by a first round) beside mma80's, and its
-- summary's default is the faster of the two.
local KV8_WIDE_HEAD_DIM = 192
local LAUNCH_SPLITS_MAX_HEAD_DIM = 128
function family.default(head_dim, dtype)
  if not constraints.KV8_DTYPES[dtype] and head_dim > LAUNCH_SPLITS_MAX_HEAD_DIM then return {} end
  return {BLOCK_M = 64, BLOCK_N = head_dim < KV8_WIDE_HEAD_DIM and 64 or 32, WARPS = 4, STAGES = 2,
          PACK_GQA = 1, SPLITS = 0}
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
-- the paged family serves those head dims with smaller key tiles, and so
-- does this one for an fp8 cache (BLOCK_N 32, below).
family.constraints[#family.constraints + 1] = function(c)
  if c.SPLITS == 0 and c.HEAD_DIM > LAUNCH_SPLITS_MAX_HEAD_DIM and c.BLOCK_N > 32 then
    return ("SPLITS 0 above head dim %d on %d-key tiles: its blocks spill"):format(LAUNCH_SPLITS_MAX_HEAD_DIM,
                                                                                 c.BLOCK_N)
  end
end
-- 32-key tiles only for an fp8 cache above d128, where no other tile of the
-- launch's splits fits (the 16-bit dtypes' space is as it was).
family.constraints[#family.constraints + 1] = function(c)
  if c.BLOCK_N == 32 and not (constraints.KV8_DTYPES[c.DTYPE] and c.HEAD_DIM > LAUNCH_SPLITS_MAX_HEAD_DIM) then
    return "BLOCK_N 32 is an fp8 cache's above head dim " .. LAUNCH_SPLITS_MAX_HEAD_DIM
  end
end
family.constraints[#family.constraints + 1] = constraints.fp8_conversion
family.constraints[#family.constraints + 1] = constraints.deep_stages_fp8_only
-- An fp8 cache's splits are the launch's only: it chooses one where the
-- grid fills the GPU, so the fixed counts (tuned per batch before the
-- launch could choose) would only lengthen its tuning.
family.constraints[#family.constraints + 1] = function(c)
  if constraints.KV8_DTYPES[c.DTYPE] and c.SPLITS ~= 0 then
    return "an fp8 cache's splits are the launch's (SPLITS 0)"
  end
end
-- An fp8 cache widens each tile while the next is in flight: two stages
-- at least (STAGES here is 2 or 3 already; the rule says why it must stay).
family.constraints[#family.constraints + 1] = function(c)
  if constraints.KV8_DTYPES[c.DTYPE] and c.STAGES < 2 then
    return "an fp8 cache needs STAGES 2 or more"
  end
end

return family
