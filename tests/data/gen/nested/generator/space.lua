-- Fixture for test_gen: the error is in a module this file loads.
return fat.require("helper")
