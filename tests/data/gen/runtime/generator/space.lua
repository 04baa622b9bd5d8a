-- Fixture for test_gen: a space file that fails while running, on line 3.
local family = nil
return {generate = family.generate}
