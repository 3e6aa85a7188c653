-- Acquire, or recognise a retry by the same owner.
-- KEYS[1] lock key, KEYS[2] fencing counter key (same hash slot)
-- ARGV[1] owner token, ARGV[2] lease in ms
-- Returns {1, token} when granted, {0, remaining ms} when another owner holds the key.
-- Tokens travel as strings: Lua numbers are doubles, exact below 2^53, but Lua prints them
-- with 14 significant digits.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  local token = redis.call('GET', KEYS[2])
  if token then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token}
  end
elseif holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- A new grant: the token exceeds both the last one and the server clock in microseconds,
-- so it keeps increasing after a restart that lost the counter (unless the clock steps back).
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = string.format('%.0f', math.max(last + 1, now_us))
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token}
