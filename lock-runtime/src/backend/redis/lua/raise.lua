-- Redlock: raise a fresh grant's fencing token to the one chosen across the masters (the
-- greatest any of them granted), so that every master of the quorum keeps a counter at least
-- that high and a later quorum, which shares one of them, grants a greater one.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] the leases of a shared kind
-- ARGV[1] owner token, ARGV[2] the token this master granted, ARGV[3] the chosen token
-- The lock key is a mutex's string (`<owner>:<token>`) or a shared kind's hash, whose grant
-- of the owner and its lease are renamed to the chosen token (see shared.lua).
-- Returns 1 when the grant carries the chosen token, 0 when it is gone (expired, released,
-- or granted anew) or the counter holds something that is not a lock's.
local owner, granted, chosen = ARGV[1], ARGV[2], ARGV[3]
local now_ms, now_us = server_time()
local kind = redis.call('TYPE', KEYS[1]).ok
local grant, expires
if kind == 'string' then
  if redis.call('GET', KEYS[1]) ~= owner .. ':' .. granted then
    return 0
  end
elseif kind == 'hash' and redis.call('TYPE', KEYS[3]).ok == 'zset' then
  grant = read_grant(KEYS[1], owner)
  expires = tonumber(redis.call('ZSCORE', KEYS[3], owner .. ':' .. granted))
  if not grant or grant.token ~= granted or not expires or expires <= now_ms then
    return 0
  end
else
  return 0
end
local last = read_fence(KEYS[2])
if not last then
  return 0
end
if tonumber(chosen) > last then
  write_fence(KEYS[2], tonumber(chosen), now_us)
end
if kind == 'string' then
  redis.call('SET', KEYS[1], owner .. ':' .. chosen, 'KEEPTTL')
else
  -- Added before the old member goes: the set never empties, and keeps its TTL.
  redis.call('ZADD', KEYS[3], string.format('%.0f', expires), owner .. ':' .. chosen)
  redis.call('ZREM', KEYS[3], owner .. ':' .. granted)
  redis.call('HSET', KEYS[1], 'o:' .. owner, grant.kind .. ' ' .. chosen .. ' ' .. grant.slot ..
    ' ' .. grant.count)
  if tonumber(chosen) > latest_shared_token(KEYS[1], 0) then
    redis.call('HSET', KEYS[1], 't', chosen)
  end
end
return 1
