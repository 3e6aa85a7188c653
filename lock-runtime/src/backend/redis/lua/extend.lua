-- Restart the leases of many locks at once (the renewal loop's batch).
-- KEYS[i] lock key; ARGV[3i-2] its owner token, ARGV[3i-1] the fencing token of its grant,
-- ARGV[3i] its lease in ms.
-- Returns one 1 (extended) or 0 per key: 0 when the key is gone, owned by another owner, or
-- granted anew (to the same owner, by a late request, after it was deleted): the holder must
-- learn that its grant ended. A lock key that is a hash holds a shared kind's grants, one
-- field per owner (`<kind> <token> <slot> <count> <expires ms>`, see shared.lua): the owner's
-- field is extended if it holds that token and its lease has not ended. A key holding another
-- type (replaced by someone else's data) is not ours either: 0 for it, the others go on.
local extended = {}
local now_ms
for i, key in ipairs(KEYS) do
  local owner, token, lease_ms = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  local value = redis.pcall('GET', key)
  extended[i] = 0
  if value == owner .. ':' .. token then
    redis.call('PEXPIRE', key, lease_ms)
    extended[i] = 1
  elseif type(value) == 'table' and redis.call('TYPE', key).ok == 'hash' then
    local grant = redis.call('HGET', key, owner)
    local kind, rest, expires = string.match(grant or '', '^(%a) ' .. token .. ' (%d+ %d+) (%d+)$')
    if not now_ms then
      local time = redis.call('TIME')
      now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    end
    if kind and tonumber(expires) > now_ms then
      redis.call('HSET', key, owner, kind .. ' ' .. token .. ' ' .. rest .. ' ' ..
        string.format('%.0f', now_ms + lease_ms))
      if redis.call('PTTL', key) < lease_ms then
        redis.call('PEXPIRE', key, lease_ms)
      end
      extended[i] = 1
    end
  end
end
return extended
