-- Fixture for test_gen: a script that never ends; the instruction cap stops it.
local n = 0
while true do n = n + 1 end
