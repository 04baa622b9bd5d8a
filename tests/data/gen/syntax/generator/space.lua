-- Fixture for test_gen: a space file with a syntax error on line 4, which
-- fat_gen_open must report as "generator/space.lua:4: ...".
local families = {}
local limit = = 166912
return families
