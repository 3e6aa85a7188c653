-- Redlock: raise a fresh grant's fencing token to the one chosen across the masters (the
-- greatest any of them granted), so that every master of the quorum keeps a counter at least
-- that high and a later quorum, which shares one of them, grants a greater one.
-- KEYS[1] lock key, KEYS[2] fencing counter
-- ARGV[1] owner token, ARGV[2] the token this master granted, ARGV[3] the chosen token
-- Returns 1 when the grant carries the chosen token, 0 when it is gone (expired, released,
-- or granted anew) or the counter holds something that is not a lock's.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
local last = read_fence(KEYS[2])
if not last then
  return 0
end
local chosen = tonumber(ARGV[3])
if chosen > last then
  local _, now_us = server_time()
  write_fence(KEYS[2], chosen, now_us)
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[3], 'KEEPTTL')
return 1
