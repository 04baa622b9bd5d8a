-- Fixture for test_gen: reports, through an error on line 6, which globals a
-- generator script can see.
local names = {"os", "io", "debug", "package", "require", "dofile", "loadfile", "load", "print",
               "string", "table", "math", "utf8", "fat"}
local seen = {} for i, n in ipairs(names) do seen[i] = n .. "=" .. type(_G[n]) end
error("globals: " .. table.concat(seen, " "))
