-- The search space: every template family, expanded over head dims, dtypes
-- and mask modes, with each family's constraints pruning what cannot work
-- before anything is compiled. A family is one file (family_*.lua, fields in
-- generator/API.md); adding one is that file plus one line below.
-- C calls generate(query) and head_dims(direction); see generator/API.md.

local expand = fat.require("expand")

local families = {
  fat.require("family_mma80"),  -- forward, mma.sync m16n8k16, sm_80 and newer
  fat.require("family_splitkv"),  -- forward for decoding: packed GQA, keys split over blocks
  fat.require("family_paged"),  -- forward over a paged K/V cache (decoding, chunked prefill)
  fat.require("family_wgmma90"),  -- forward, wgmma (sm_90a): Hopper's warpgroup products
  fat.require("family_ws90"),  -- forward, wgmma + TMA (sm_90a), warp-specialised: producer and consumers
  fat.require("family_materialize"),  -- forward baseline: scores in device memory, never a winner
  fat.require("family_bwd_mma80"),  -- backward, mma.sync m16n8k16, dQ by atomics or a second pass
  fat.require("family_bwd_mma80f"),  -- backward, mma80's with variable lengths and the soft-cap
  fat.require("family_bwd_wgmma90"),  -- backward, wgmma (sm_90a), dQ by atomics
  fat.require("family_bwd_ws90"),  -- backward, wgmma + TMA (sm_90a), warp-specialised, dQ by bulk reductions
}

-- Largest dynamic shared memory one block may opt into (bytes), by target:
-- A100 and Orin 163 KiB; the GeForce and workstation parts (sm_86, sm_89,
-- sm_120) 99 KiB; H100 and the datacenter Blackwells 227 KiB. A query's
-- smem_limit > 0 replaces these (the GPU's own figure); these prune when
-- there is no GPU (--arch).
local SMEM_LIMIT = {sm_80 = 166912, sm_86 = 101376, sm_87 = 166912, sm_89 = 101376,
                    sm_90a = 232448, sm_100 = 232448, sm_103 = 232448, sm_120 = 101376}
-- The targets in order, as --arch and its refusal list them.
local ARCHS = {"sm_80", "sm_86", "sm_87", "sm_89", "sm_90a", "sm_100", "sm_103", "sm_120"}
local KNOWN_ARCHS = table.concat(ARCHS, ", ")

local space = {}

-- A malformed family file is reported when the generator opens, naming it.
local REQUIRED = {
  name = "string", direction = "string", template = "string", entry = "string",
  archs = "table", head_dims = "table", dtypes = "table", masks = "table", params = "table",
  constraints = "table", tag = "function", default = "function", resources = "function",
}
for i, f in ipairs(families) do
  for field, kind in pairs(REQUIRED) do
    if type(f) ~= "table" or type(f[field]) ~= kind then
      error(("family %d (%s): field '%s' must be a %s"):format(
        i, type(f) == "table" and tostring(f.name) or "?", field, kind), 0)
    end
  end
end

local function contains(list, value)
  for _, v in ipairs(list) do if v == value then return true end end
  return false
end

-- The query's list, or ALL when the query leaves it empty; nil and a message
-- when it asks for something the space does not have.
local function selection(wanted, all, what, direction)
  if #wanted == 0 then return all end
  for _, v in ipairs(wanted) do
    if not contains(all, v) then
      local known = {}
      for i, a in ipairs(all) do known[i] = tostring(a) end
      return nil, ("%s %s is not in the %s space (%s)"):format(what, v, direction, table.concat(known, ", "))
    end
  end
  return wanted
end

-- Union of a list field over FAMILIES, in first-seen order (sorted if numeric).
local function union(fams, field)
  local out, seen = {}, {}
  for _, f in ipairs(fams) do
    for _, v in ipairs(f[field]) do
      if not seen[v] then seen[v], out[#out + 1] = true, v end
    end
  end
  if field == "head_dims" then table.sort(out) end
  return out
end

local function of_direction(direction)
  local out = {}
  for _, f in ipairs(families) do
    if f.direction == direction then out[#out + 1] = f end
  end
  return out
end

-- "BLOCK_M=128 BLOCK_N=64 STAGES=2 WARPS=4": names sorted, so it is canonical.
local function canonical(f, c)
  local names = {}
  for i, p in ipairs(f.params) do names[i] = p.name end
  table.sort(names)
  for i, n in ipairs(names) do names[i] = n .. "=" .. tostring(c[n]) end
  return table.concat(names, " ")
end

-- Calls VISIT(config) for each point of the family's parameter grid, first
-- parameter outermost.
local function each_config(f, visit)
  local config = {}
  local function level(i)
    if i > #f.params then return visit(config) end
    local p = f.params[i]
    for _, v in ipairs(p.values) do
      config[p.name] = v
      level(i + 1)
    end
  end
  level(1)
end

local function same_config(f, a, b)
  for _, p in ipairs(f.params) do
    if a[p.name] ~= b[p.name] then return false end
  end
  return true
end

function space.head_dims(direction)
  return union(of_direction(direction), "head_dims")
end

-- The targets the space generates for (each with a shared-memory limit).
function space.archs()
  local out = {}
  for i, a in ipairs(ARCHS) do out[i] = a end
  return out
end

-- QUERY: {direction, head_dims, dtypes, masks, arch, smem_limit}; empty lists
-- mean everything. Returns {variants = {...}, pruned = {...}}, or nil and a
-- message naming the bad value.
function space.generate(query)
  local limit = SMEM_LIMIT[query.arch]
  if not limit then
    return nil, ("unknown arch '%s' (known: %s)"):format(tostring(query.arch), KNOWN_ARCHS)
  end
  if query.smem_limit > 0 then limit = query.smem_limit end
  local target = {arch = query.arch, smem_limit = limit}

  local fams = {}
  for _, f in ipairs(of_direction(query.direction)) do
    if contains(f.archs, query.arch) then fams[#fams + 1] = f end
  end
  if #fams == 0 then
    return nil, ("no template family generates %s kernels for %s"):format(query.direction, query.arch)
  end
  local head_dims, why = selection(query.head_dims, union(fams, "head_dims"), "head dim", query.direction)
  if not head_dims then return nil, why end
  local dtypes, why2 = selection(query.dtypes, union(fams, "dtypes"), "dtype", query.direction)
  if not dtypes then return nil, why2 end
  local masks, why3 = selection(query.masks, union(fams, "masks"), "mask", query.direction)
  if not masks then return nil, why3 end

  local variants, pruned, names = {}, {}, {}
  for _, f in ipairs(fams) do
    for _, d in ipairs(head_dims) do
      if contains(f.head_dims, d) then
        for _, dtype in ipairs(dtypes) do if contains(f.dtypes, dtype) then
          local default = f.default(d, dtype)
          for _, mask in ipairs(masks) do if contains(f.masks, mask) then
            each_config(f, function(c)
              c.HEAD_DIM, c.MASK, c.DTYPE = d, mask, dtype
              local name = ("%s.%s.%s.d%d.%s.%s"):format(f.direction, f.name, dtype, d, mask, f.tag(c))
              assert(not names[name], "two configurations are both named " .. name)
              names[name] = true
              local reasons = {}
              for _, rule in ipairs(f.constraints) do
                reasons[#reasons + 1] = rule(c, target)
              end
              if #reasons > 0 then
                pruned[#pruned + 1] = {name = name, reason = table.concat(reasons, "; ")}
                return
              end
              local params = canonical(f, c)
              -- A family may run a head dim on a wider template (zero columns).
              local template_d = f.template_head_dim and f.template_head_dim(d, c) or d
              -- PADS_HEAD_DIM: 1 where it does (a template may lay out its
              -- buffers for the template's width then).
              local values = {HEAD_DIM = template_d, PADS_HEAD_DIM = template_d ~= d and 1 or 0,
                              -- O's 16-bit type: bf16 for the bf16 and the e4m3 inputs,
                              -- Q's for an fp8 K/V cache
                              IS_BF16 = (dtype == "bf16" or dtype == "e4m3" or dtype == "bf16-e4m3kv") and 1 or 0,
                              IS_FP8 = dtype == "e4m3" and 1 or 0,
                              -- K and V in e4m3, Q 16-bit (templates/fwd_mma80.cu's KV8)
                              KV8 = (dtype == "fp16-e4m3kv" or dtype == "bf16-e4m3kv") and 1 or 0,
                              IS_CAUSAL = mask == "causal" and 1 or 0, IS_LOCAL = mask == "local" and 1 or 0,
                              VARIANT_NAME = name}
              for k, v in pairs(f.fixed or {}) do values[k] = v end
              for _, p in ipairs(f.params) do values[p.name] = c[p.name] end
              local r = f.resources(c)
              variants[#variants + 1] = {
                name = name, family = f.name, params = params, entry = f.entry,
                source = expand.source{template = f.template, values = values, name = name, params = params},
                direction = f.direction, dtype = dtype, mask = mask, head_dim = d,
                block_m = r.block_m, threads = r.threads, smem_bytes = r.smem_bytes,
                is_default = same_config(f, c, default),
              }
            end)
          end end
        end end
      end
    end
  end
  return {variants = variants, pruned = pruned}
end

return space
