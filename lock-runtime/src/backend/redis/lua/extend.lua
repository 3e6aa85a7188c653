-- Restart the leases of many locks at once (the renewal loop's batch).
-- For the i-th lease: ARGV[5i-4] its owner token, ARGV[5i-3] the fencing token of its grant,
-- ARGV[5i-2] its lease in ms, ARGV[5i-1] how many keys it has, which follow the previous
-- lease's in KEYS: 1 for a mutex (its lock key: see mutex.lua), 2 for a shared kind (its lock key, a hash,
-- and its leases, a sorted set: see shared.lua), ARGV[5i] the permit or shard of its grant,
-- or '' (a grant of the same owner and token in another slot, which a Redlock master may
-- keep when its give-back was lost, is not this one).
-- Returns one 1 (extended) or 0 per lease: 0 when the grant is gone, owned by another owner,
-- or granted anew (to the same owner, by a late request, after it was deleted): the holder
-- must learn that its grant ended. A key holding another type (replaced by someone else's
-- data) is not ours either: 0 for it, the others go on.
local extended = {}
local next_key = 1
local now_ms
for i = 1, #ARGV / 5 do
  local owner, token, lease_ms = ARGV[5 * i - 4], ARGV[5 * i - 3], tonumber(ARGV[5 * i - 2])
  local slot = ARGV[5 * i]
  local key = KEYS[next_key]
  extended[i] = 0
  if ARGV[5 * i - 1] == '1' then
    next_key = next_key + 1
    local held = redis.pcall('GET', key)
    local held_token, held_owner
    if type(held) == 'string' then
      held_token, held_owner = string.match(held, '^[hw]:(%d+):%d+:%d+:(.*)$')
    end
    if held_token == token and held_owner == owner then
      redis.call('PEXPIRE', key, lease_ms)
      extended[i] = 1
    end
  else
    local leases = KEYS[next_key + 1]
    next_key = next_key + 2
    local expires = redis.pcall('ZSCORE', leases, owner .. ':' .. token)
    if not now_ms then
      local time = redis.call('TIME')
      now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    end
    local grant = slot ~= '' and redis.pcall('HGET', key, 'o:' .. owner)
    local in_slot = slot == '' or
      (type(grant) == 'string' and string.match(grant, '^%a ' .. token .. ' ' .. slot .. ' '))
    if type(expires) == 'string' and tonumber(expires) > now_ms and in_slot then
      redis.call('ZADD', leases, string.format('%.0f', now_ms + lease_ms), owner .. ':' .. token)
      for _, kept in ipairs({key, leases}) do
        if redis.call('PTTL', kept) < lease_ms then
          redis.call('PEXPIRE', kept, lease_ms)
        end
      end
      extended[i] = 1
    end
  end
end
return extended
