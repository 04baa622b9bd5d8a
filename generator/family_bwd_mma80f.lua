-- The backward "mma80f" family: mma80's backward (templates/bwd_mma80.cu,
-- family_bwd_mma80.lua's space, tiles and constraints) with FEATURES 1, the
-- features a dense variant leaves out and training batches bring: variable
-- lengths (cu_seqlens_q and cu_seqlens_k, seqused_k) and the soft-cap, read
-- from the parameters at run time. The dense families serve everything
-- else; this one serves (and is timed on) those problems only (core/family.c).

local mma80 = fat.require("family_bwd_mma80")
local WARP_SIZE = 32
local ACCUMULATOR_BUDGET = 192  -- as mma80's: registers of 255 for accumulators

local family = {}
for k, v in pairs(mma80) do family[k] = v end
family.name = "mma80f"
family.fixed = {FEATURES = 1}

-- mma80's tiles, with twice the warps from head dim 96 on, where mma80's
-- four warps hold no room for the soft-cap's factor (the rule below).
function family.default(head_dim)
  return {BLOCK_M = 64, BLOCK_N = 64, WARPS = head_dim <= 64 and 4 or 8, DQ_MODE = "atomic", PREFETCH = 0}
end

-- The soft-cap's derivative (1 − tanh², one float a score) lives beside S
-- and dP until dS is formed: mma80's accumulator count plus one S tile.
family.constraints = {}
for i, rule in ipairs(mma80.constraints) do family.constraints[i] = rule end
family.constraints[#family.constraints + 1] = function(c)
  local threads = WARP_SIZE * c.WARPS
  local acc = (2 * c.BLOCK_N * c.HEAD_DIM + 3 * c.BLOCK_M * c.BLOCK_N) // threads
  if acc > ACCUMULATOR_BUDGET then
    return ("soft-cap: accumulators %d > %d registers per thread"):format(acc, ACCUMULATOR_BUDGET)
  end
end

return family
