-- Restart the leases of many locks at once (the renewal loop's batch).
-- For the i-th lease: ARGV[4i-3] its owner token, ARGV[4i-2] the fencing token of its grant,
-- ARGV[4i-1] its lease in ms, ARGV[4i] how many keys it has, which follow the previous
-- lease's in KEYS: 1 for a mutex (its lock key), 2 for a shared kind (its lock key, a hash,
-- and its leases, a sorted set: see shared.lua).
-- Returns one 1 (extended) or 0 per lease: 0 when the grant is gone, owned by another owner,
-- or granted anew (to the same owner, by a late request, after it was deleted): the holder
-- must learn that its grant ended. A key holding another type (replaced by someone else's
-- data) is not ours either: 0 for it, the others go on.
local extended = {}
local next_key = 1
local now_ms
for i = 1, #ARGV / 4 do
  local owner, token, lease_ms = ARGV[4 * i - 3], ARGV[4 * i - 2], tonumber(ARGV[4 * i - 1])
  local key = KEYS[next_key]
  extended[i] = 0
  if ARGV[4 * i] == '1' then
    next_key = next_key + 1
    if redis.pcall('GET', key) == owner .. ':' .. token then
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
    if type(expires) == 'string' and tonumber(expires) > now_ms then
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
