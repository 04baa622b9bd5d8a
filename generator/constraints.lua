-- Constraints that more than one template family applies, written once. Each
-- returns a constraint function as generator/API.md describes: given the
-- configuration and the target it returns nil when satisfied, else the reason.
local constraints = {}

-- Every target with mma.sync m16n8k16 (fp16 and bf16), cp.async and
-- ldmatrix: Ampere and every GPU since. sm_90a is Hopper's, whose
-- arch-specific target the wgmma families need. The families on mma.sync
-- compile for each of them (space.lua has each one's shared memory).
constraints.MMA_SYNC_ARCHS = {"sm_80", "sm_86", "sm_87", "sm_89", "sm_90a", "sm_100", "sm_103", "sm_120"}

-- The dtypes of an fp8 K/V cache: Q and O 16-bit, K and V e4m3 bytes that
-- the kernel widens with the hardware's conversion (templates/fwd_mma80.cu's
-- KV8), which sm_89 brought.
constraints.KV8_DTYPES = {["fp16-e4m3kv"] = true, ["bf16-e4m3kv"] = true}
local FP8_CONVERSION_MIN_SM = 89

-- An fp8 K/V cache's configurations only on targets that convert e4m3.
function constraints.fp8_conversion(c, target)
  local sm = tonumber(target.arch:match("^sm_(%d+)"))
  if constraints.KV8_DTYPES[c.DTYPE] and sm and sm < FP8_CONVERSION_MIN_SM then
    return ("dtype %s needs sm_%d's e4m3 conversion (%s)"):format(c.DTYPE, FP8_CONVERSION_MIN_SM, target.arch)
  end
end

-- Stages beyond three only for an fp8 K/V cache, whose e4m3 tiles hold
-- half a 16-bit one's bytes: four or six keep as many bytes in flight as
-- two or three 16-bit stages. Added for its first run (H100, d128
-- decoding: K and V read at 1.1-1.7 TB/s where the bf16 cache's read
-- 2.5-3.1), where they never won (the widening, not the memory, bounds
-- that kernel: kernel-log p3); kept for GPUs whose memory is further away.
constraints.KV8_DEEP_STAGES = 3
function constraints.deep_stages_fp8_only(c)
  if c.STAGES > constraints.KV8_DEEP_STAGES and not constraints.KV8_DTYPES[c.DTYPE] then
    return ("STAGES %d is an fp8 cache's (16-bit tiles: %d at most)"):format(c.STAGES, constraints.KV8_DEEP_STAGES)
  end
end

-- The block must fit the shared memory one block may opt into;
-- FAMILY.smem_bytes(c) says how much it asks for.
function constraints.fits_shared_memory(family)
  return function(c, target)
    local smem = family.smem_bytes(c)
    if smem > target.smem_limit then
      return ("shared memory %d > %d bytes"):format(smem, target.smem_limit)
    end
  end
end

return constraints
