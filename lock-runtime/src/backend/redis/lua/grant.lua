-- Shared by the acquire scripts, which are appended to this text.
-- Fencing tokens travel as strings: Lua numbers are doubles, exact below 2^53, but Lua
-- prints them with 14 significant digits.

-- A new grant: the token exceeds both the last one and the server clock in microseconds,
-- so it keeps increasing after a restart that lost the counter (unless the clock steps back).
local function grant(lock_key, fence_key, owner, lease_ms)
  local time = redis.call('TIME')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local last = tonumber(redis.call('GET', fence_key) or '0')
  local token = string.format('%.0f', math.max(last + 1, now_us))
  redis.call('SET', fence_key, token)
  redis.call('SET', lock_key, owner, 'PX', lease_ms)
  return {1, token}
end

-- The owner asks again (a retry whose reply was lost): refresh the lease, same token.
-- nil if the fencing counter is gone (evicted, deleted), in which case the caller grants
-- anew, since the key is ours anyway.
local function grant_again(lock_key, fence_key, lease_ms)
  local token = redis.call('GET', fence_key)
  if token then
    redis.call('PEXPIRE', lock_key, lease_ms)
    return {1, token}
  end
  return nil
end

-- Why the value of a lock key (`holder`, read with pcall) cannot be a lock of this library,
-- or nil: a value of another type, or a string without a TTL (every lease has one). Such a
-- key would never be released by anyone, so waiting for it is pointless.
local function foreign_holder(lock_key, holder)
  if type(holder) == 'table' and holder.err then
    return 'it holds a ' .. redis.call('TYPE', lock_key).ok .. ', not a lock'
  end
  if holder and redis.call('PTTL', lock_key) == -1 then
    return 'it holds a string without a TTL, which no lock leaves behind'
  end
  return nil
end

-- Reads the lock key. Returns a reply to give at once (the key holds something foreign, or
-- the owner asks again), or nil and the holder (false when the key is free).
local function read_holder(lock_key, fence_key, owner, lease_ms)
  local holder = redis.pcall('GET', lock_key)
  local foreign = foreign_holder(lock_key, holder)
  if foreign then
    return {2, foreign}
  end
  if holder == owner then
    return grant_again(lock_key, fence_key, lease_ms) or grant(lock_key, fence_key, owner, lease_ms)
  end
  return nil, holder
end
