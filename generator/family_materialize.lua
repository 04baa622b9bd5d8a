-- The "materialize" family: the materialising baseline (templates/materialize_fwd.cu),
-- attention as three kernels that write the fp32 scores of every (query, key)
-- pair to device memory, softmax them, then multiply by V. It is never a
-- candidate for winning (the database leaves family "materialize" out of every
-- ranking); the tuner times it beside the fused kernels so that each table
-- shows the fused winner's speedup and peak-memory saving over it, measured.
-- Its one parameter changes speed, never results.

local constraints = fat.require("constraints")
local THREADS = 256        -- every kernel of the family runs 256-thread blocks
local FLOAT_BYTES = 4      -- shared tiles hold fp32
local TILES_IN_SMEM = 2    -- Q and K (scores), or P and V (P·V)
local ROW_PAD = 1          -- one float of padding per shared row: conflict-free column reads

local family = {
  name = "materialize",
  direction = "fwd",
  template = "materialize_fwd.cu",
  -- The three kernels are this name with _scores, _softmax and _pv appended
  -- (tuner/fwd_job.h); tuner/gpu_run.c launches them in sequence.
  entry = "fat_fwd_materialize",
  archs = constraints.MMA_SYNC_ARCHS,
  head_dims = {64, 96, 128, 192, 256},
  dtypes = {"fp16", "bf16"},
  masks = {"none", "causal"},
  params = {
    {name = "TILE", values = {16, 32}},  -- rows x columns of one output tile (S and O)
  },
}

function family.tag(c)
  return ("t%d"):format(c.TILE)
end

-- A baseline of the tuning, not a configuration of it: no point of its grid
-- is the family default (nothing matches an empty configuration).
function family.default()
  return {}
end

function family.smem_bytes(c)
  return TILES_IN_SMEM * c.TILE * (c.TILE + ROW_PAD) * FLOAT_BYTES
end

-- block_m is the query rows of one tile: grid.y of the scores and P·V kernels.
function family.resources(c)
  return {threads = THREADS, block_m = c.TILE, smem_bytes = family.smem_bytes(c)}
end

family.constraints = {
  -- The scores kernel walks the head dimension one whole tile at a time.
  function(c)
    if c.HEAD_DIM % c.TILE ~= 0 then
      return ("head dim %d is not a multiple of TILE %d"):format(c.HEAD_DIM, c.TILE)
    end
  end,
}

return family
