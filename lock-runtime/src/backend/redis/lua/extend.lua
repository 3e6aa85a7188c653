-- Restart the leases of many locks at once (the renewal loop's batch).
-- KEYS[i] lock key; ARGV[2i-1] its owner token, ARGV[2i] its lease in ms.
-- Returns one 1 (extended) or 0 (gone, or owned by another token) per key. A key holding
-- another type (replaced by someone else's data) is not ours: 0 for it, the others go on.
local extended = {}
for i, key in ipairs(KEYS) do
  if redis.pcall('GET', key) == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    extended[i] = 1
  else
    extended[i] = 0
  end
end
return extended
