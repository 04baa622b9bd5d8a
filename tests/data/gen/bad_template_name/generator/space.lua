-- Fixture for test_gen: a template name that tries to leave templates/.
return fat.read_template("../generator/space.lua")
