-- tables.lua - Lua tables and strings under churn, for bench/real.py: Lua allocates every
-- object through one realloc-based function, so this is realloc, malloc and free of small
-- blocks, with the collector freeing in bulk.
local t = {}
for i = 1, 400000 do t[i] = tostring(i) .. "-" .. string.rep("x", i % 40) end
local total = 0
for round = 1, 6 do
  local m = {}
  for i = round, #t, 2 do
    local s = t[i]
    m[s] = { i, s:upper(), #s }
  end
  for k, v in pairs(m) do total = total + v[3] end
  for i = round, #t, 7 do t[i] = t[i] .. round end
  m = nil
  collectgarbage()
end
local parts = {}
for i = 1, 200000 do parts[#parts + 1] = t[i]:sub(1, 6) end
print(total, #table.concat(parts, ","))
