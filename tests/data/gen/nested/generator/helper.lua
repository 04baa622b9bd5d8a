-- Fixture for test_gen: fails on line 2 when space.lua requires it.
error("helper refuses to load")
