-- Constraints that more than one template family applies, written once. Each
-- returns a constraint function as generator/API.md describes: given the
-- configuration and the target it returns nil when satisfied, else the reason.
local constraints = {}

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
