-- Fixture for test_gen: a space whose variant lacks most fields; C must
-- reject it naming the variant and the field, and free what it copied.
local space = {}
function space.head_dims() return {} end
function space.generate() return {variants = {{name = "fwd.x"}}, pruned = {}} end
return space
