-- The backward "ws90" family: FlashAttention's backward on Hopper,
-- warp-specialised (templates/bwd_ws90.cu), sm_90a only. A producer warp
-- streams Q and dO by the tensor copy engine through a ring of mbarriers,
-- a writer warp adds each tile's dQ into the fp32 accumulator with one bulk
-- reduction, and one or two consumer warpgroups of 64 keys each compute on
-- wgmma with the registers the others gave up (setmaxnreg). Its kernels are
-- named as mma80's (tuner/fwd_job.h gives the launch order) and the main
-- one takes four tensor maps (tuner/bwd_launch.c). dQ is summed in
-- whatever order the key blocks reach a query tile (DQ_MODE atomic), or in
-- a fixed order, one key block after another by semaphores (ordered: the
-- deterministic backward, bit-identical run to run).
-- Head dims to 128 (96 on the 128-column template), 192 and 256: there a
-- warpgroup's dK and dV no longer fit its registers beside Sᵀ, so two
-- consumers share a group of 64 keys, each half the columns of dK and dV
-- and half the queries of Sᵀ and dPᵀ, meeting once a tile through Pᵀ and
-- dSᵀ in shared memory (the template's kDSplit; d192's halves are a slab
-- and half of the middle one each).

local constraints = fat.require("constraints")
local tiles = fat.require("wgmma_tiles")
local KEYS_PER_WARPGROUP = tiles.ROWS_PER_WARPGROUP  -- every product's rows are a warpgroup's keys
local FLOAT_BYTES = 4
local ROW_STATS = 2             -- lse and D of each ring buffer's tile

local BARRIER_BYTES = 8         -- static shared memory: 2 + 2·STAGES mbarriers
-- Accumulators a consumer thread may hold at once: Sᵀ and dPᵀ (BLOCK_M / 2
-- each) beside dK and dV (head dim / 2 each), as family_bwd_wgmma90.lua.
local ACCUMULATOR_BUDGET = 192
-- Registers a consumer thread has (the template's kConsumerRegs): a lone
-- consumer keeps the launch's 255, two take 240 by setmaxnreg (232 where
-- PERSISTENT leaves the producer 40 for its loop over items).
local CONSUMER_REGISTERS = {[1] = 255, [2] = 240}
local PERSISTENT_CONSUMER_REGISTERS = {[1] = 255, [2] = 232}
-- Beside the accumulators the A fragments of Pᵀ and dSᵀ (BLOCK_M / 4 each)
-- are live; ptxas fits up to this many more than the thread has by reusing
-- Sᵀ's registers as they die (d64 with 128-query tiles: 256 needed, no
-- spill at 255, 4-44 bytes spilled at 240).
local REGISTER_SLACK = 8

local family = {
  name = "ws90",
  direction = "bwd",
  template = "bwd_ws90.cu",
  entry = "fat_bwd_ws90",
  archs = {"sm_90a"},
  head_dims = {64, 96, 128, 192, 256},
  dtypes = {"fp16", "bf16"},
  masks = {"none", "causal", "local"},
  params = {
    {name = "BLOCK_M", values = {64, 128}},  -- query rows per tile: Sᵀ's N
    {name = "BLOCK_N", values = {64, 128}},  -- keys per thread block, 64 per consumer warpgroup
    {name = "STAGES", values = {2, 3}},      -- Q and dO buffers of the ring
    -- Two consumers' dQ: 0 shared after they meet, 1 each over its own keys,
    -- summed in shared memory (they never meet)
    {name = "DQ_KEYS", values = {0, 1}},
    -- 1: at most one block an SM, each looping over key blocks (the next
    -- one's K, V and first tiles loaded while the last one's dK and dV go out)
    {name = "PERSISTENT", values = {0, 1}},
    -- 1 (causal): the items in groups of (key head, batch) pairs whose Q,
    -- dO and dQ accumulator fit a third of the L2, heaviest first within a
    -- group, rather than every pair's heaviest key block first
    {name = "GROUPED", values = {0, 1}},
    -- 1: each tile's lse and D into registers before its products, not
    -- beside their first use (where P's and dS's arithmetic waited for them)
    {name = "STATS_AHEAD", values = {0, 1}},
    -- 1: dSᵀ into shared memory by stmatrix (four 8 x 8 blocks a warp an
    -- instruction), not a 32-bit st.shared a value pair
    {name = "DS_STSM", values = {0, 1}},
    -- dQ summed in no fixed order (atomic), or in the items' order, each
    -- query tile's key blocks one after another (ordered: deterministic);
    -- the launcher reads it as it reads mma80's
    {name = "DQ_MODE", values = {"atomic", "ordered"}},
    -- 1 (ordered, PERSISTENT, no mask): the walks of the key blocks a round
    -- of the persistent grid holds start spread over their pair's query
    -- tiles, each tile's adds in the order the blocks reach it, rather than
    -- every walk from the first tile, each block a handoff behind the last
    {name = "DQ_SHIFT", values = {0, 1}},
  },
}

-- m64n128s2kpgaxr: BLOCK_M, BLOCK_N, STAGES, then k for DQ_KEYS 1, p for
-- PERSISTENT 1, g for GROUPED 1, a for STATS_AHEAD 1, x for DS_STSM 1, r
-- for DQ_SHIFT 1, and .ordered for DQ_MODE ordered.
function family.tag(c)
  return ("m%dn%ds%d%s%s%s%s%s%s%s"):format(c.BLOCK_M, c.BLOCK_N, c.STAGES, c.DQ_KEYS == 1 and "k" or "",
                                            c.PERSISTENT == 1 and "p" or "", c.GROUPED == 1 and "g" or "",
                                            c.STATS_AHEAD == 1 and "a" or "", c.DS_STSM == 1 and "x" or "",
                                            c.DQ_SHIFT == 1 and "r" or "", c.DQ_MODE == "ordered" and ".ordered" or "")
end

family.template_head_dim = tiles.template_head_dim

-- No fixed choice of its own: mma80's default is every problem's baseline.
function family.default()
  return {}
end

-- Consumers sharing a group of 64 keys (the template's kDSplit): two past
-- the 128-column template.
local function key_split(c)
  return tiles.template_head_dim(c.HEAD_DIM) > 128 and 2 or 1
end

local function consumers(c)
  return c.BLOCK_N // KEYS_PER_WARPGROUP * key_split(c)
end

-- fp32 dQ buffers: one, or one a consumer where dQ's 64-row blocks are
-- shared among consumers that meet by keys because the head dim has no
-- whole-slab column slices for them (the template's kDqSplitK: d64 over
-- two with DQ_KEYS 0).
local function dq_buffers(c)
  if key_split(c) > 1 then return 0 end  -- dQ from the registers (the ring fills shared memory)
  local row_blocks = c.BLOCK_M // KEYS_PER_WARPGROUP
  local shares = c.DQ_KEYS == 0 and consumers(c) > row_blocks and consumers(c) // row_blocks or 1
  local split_k = shares > 1 and (tiles.template_head_dim(c.HEAD_DIM) // shares) % tiles.SLAB ~= 0
  return split_k and shares or 1
end

-- dSᵀ alternates between two buffers (tile parity) where the consumers
-- meet; with DQ_KEYS 1 each reads only its own rows of one.
local function ds_buffers(c)
  return c.DQ_KEYS == 1 and 1 or 2
end

-- K and V (BLOCK_N rows), STAGES Q and dO tiles (BLOCK_M rows), the dSᵀ
-- buffers (BLOCK_N x BLOCK_M; with two consumers a key group as many of
-- Pᵀ), the fp32 dQ buffers (BLOCK_M x head dim), STAGES rows of lse and D,
-- the alignment slack and the barriers.
function family.smem_bytes(c)
  local d = tiles.template_head_dim(c.HEAD_DIM)
  return (2 * c.BLOCK_N + 2 * c.STAGES * c.BLOCK_M) * d * tiles.ELEMENT_BYTES +
         ds_buffers(c) * key_split(c) * c.BLOCK_N * c.BLOCK_M * tiles.ELEMENT_BYTES +
         dq_buffers(c) * c.BLOCK_M * d * FLOAT_BYTES +
         c.STAGES * ROW_STATS * c.BLOCK_M * FLOAT_BYTES + tiles.ALIGNMENT_SLACK +
         (2 + 2 * c.STAGES) * BARRIER_BYTES
end

-- block_m is the key block: grid.x of the main kernel is ceil(seqlen_k / BLOCK_N).
function family.resources(c)
  return {threads = tiles.THREADS_PER_WARPGROUP * (consumers(c) + 1), block_m = c.BLOCK_N,
          smem_bytes = family.smem_bytes(c)}
end

family.constraints = {
  function(c)
    -- Past the 128-column template the ring of Q and dO tiles of 64 rows
    -- fills shared memory beside K, V, Pᵀ and dSᵀ; dQ leaves from the
    -- registers, shared by columns, in no fixed order.
    if key_split(c) > 1 then
      if c.BLOCK_M ~= 64 or c.BLOCK_N ~= 64 then
        return ("BLOCK_M %d, BLOCK_N %d: head dim %d takes 64 x 64 tiles (two consumers share 64 keys)"):format(
          c.BLOCK_M, c.BLOCK_N, c.HEAD_DIM)
      end
      if c.DQ_KEYS == 1 then
        return ("DQ_KEYS 1: the two consumers of head dim %d share their keys"):format(c.HEAD_DIM)
      end
      if c.DQ_MODE == "ordered" then
        return ("DQ_MODE ordered: head dim %d has no dQ buffer for the writer"):format(c.HEAD_DIM)
      end
    end
  end,
  function(c)
    if c.DQ_KEYS == 1 and consumers(c) < 2 then return "DQ_KEYS 1: one consumer owns every key already" end
  end,
  function(c)
    -- Two bulk adds of one tile from one thread are not ordered with each
    -- other, so the sum of d64's two partial dQ buffers would not be either.
    if c.DQ_MODE == "ordered" and dq_buffers(c) > 1 then
      return "DQ_MODE ordered: dQ split by keys over two buffers (d64, DQ_KEYS 0, BLOCK_M 64 over BLOCK_N 128)"
    end
  end,
  function(c)
    -- The spread walks need a round's blocks all resident (PERSISTENT), and
    -- every walk over all its pair's tiles (no mask: with causal or a
    -- window the blocks see different tiles).
    if c.DQ_SHIFT == 1 and not (c.DQ_MODE == "ordered" and c.PERSISTENT == 1 and c.MASK == "none") then
      return "DQ_SHIFT 1: only DQ_MODE ordered with PERSISTENT 1 and no mask"
    end
  end,
  function(c)
    -- Without a mask (and with a window, whose items are ordered as without)
    -- the items go pair by pair already, every key block of a pair together.
    if c.GROUPED == 1 and c.MASK ~= "causal" then return "GROUPED 1: only causal (the other masks go pair by pair)" end
  end,
  function(c)
    -- The consumers' 232 registers beside the producer's 40 do not hold a
    -- second consumer's dQ at the 128-column template: 84-152 bytes spilled.
    if c.PERSISTENT == 1 and c.DQ_KEYS == 1 and tiles.template_head_dim(c.HEAD_DIM) == 128 then
      return "PERSISTENT 1 with DQ_KEYS 1: spills at the 128-column template (232 registers a consumer)"
    end
  end,
  constraints.fits_shared_memory(family),
  function(c)
    local acc = (c.BLOCK_M + tiles.template_head_dim(c.HEAD_DIM)) // key_split(c)
    if acc > ACCUMULATOR_BUDGET then
      return ("accumulators %d > %d registers per thread"):format(acc, ACCUMULATOR_BUDGET)
    end
  end,
  function(c)
    local need = (c.BLOCK_M + tiles.template_head_dim(c.HEAD_DIM) + c.BLOCK_M // 2) // key_split(c)
    local have = (c.PERSISTENT == 1 and PERSISTENT_CONSUMER_REGISTERS or CONSUMER_REGISTERS)[consumers(c)]
    if not have then return ("%d consumer warpgroups: the template takes one or two"):format(consumers(c)) end
    if need > have + REGISTER_SLACK then
      return ("registers: accumulators and A fragments %d > the %d a consumer thread has"):format(need, have)
    end
  end,
}

return family
