-- The "faulty" family: kernels that fail on purpose, one way each, for the
-- fault-isolation test (tests/test_gpu_faults.sh). MODE 1 writes far out of
-- bounds (an illegal-address fault), MODE 2 traps, MODE 3 spins on a flag
-- nobody sets (a hang only the watchdog ends). The tuner must record each as
-- failed with its reason, restart its worker and tune the real family as if
-- these were not there. Never part of the built-in space: the test adds this
-- file to a copy of generator/ given with --templates.

local MODES = {"oob", "trap", "hang"}   -- index = MODE
local THREADS = 128                     -- one block of 4 warps
local BLOCK_M = 64                      -- query rows per block, as a real kernel's grid

local family = {
  name = "faulty",
  direction = "fwd",
  template = "fwd_faulty.cu",
  entry = "fat_fwd_faulty",
  archs = {"sm_80", "sm_90a"},
  head_dims = {64, 96, 128, 192, 256},
  dtypes = {"fp16", "bf16"},
  masks = {"none", "causal"},
  params = {{name = "MODE", values = {1, 2, 3}}},
  constraints = {},  -- every mode compiles anywhere; failing is their purpose
}

function family.tag(c) return MODES[c.MODE] end
-- MODE 0 is no variant, so no faulty variant is ever the default.
function family.default() return {MODE = 0} end
function family.resources() return {threads = THREADS, block_m = BLOCK_M, smem_bytes = 0} end

return family
