-- Fixture for test_gen: loads a module that does not exist.
return fat.require("nope")
