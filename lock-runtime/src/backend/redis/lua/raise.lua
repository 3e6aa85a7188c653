-- Redlock: raise a fresh grant's fencing token to the one chosen across the masters (the
-- greatest any of them granted), so that every master of the quorum keeps a counter at least
-- that high and a later quorum, which shares one of them, grants a greater one.
-- KEYS[1] lock key, KEYS[2] fencing counter (a shared kind's, or a Redlock mutex's), KEYS[3] the leases of a shared kind
-- ARGV[1] owner token, ARGV[2] the token this master granted, ARGV[3] the chosen token
-- The lock key is a mutex's string (see mutex.lua) or a shared kind's hash, whose grant
-- of the owner and its lease are renamed to the chosen token (see shared.lua).
-- Returns 1 when the grant carries the chosen token, 0 when it is gone (expired, released,
-- or granted anew) or the counter holds something that is not a lock's.
local owner, granted, chosen = ARGV[1], ARGV[2], ARGV[3]
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  -- A mutex carries its token in its value (see mutex.lua), and on Redlock in its counter
  -- too; a run that began with this grant begins with the chosen token.
  local lock = read_lock(KEYS[1])
  if not (lock and HELD[lock.state] and lock.owner == owner and lock.token == granted) then
    return 0
  end
  local last = read_fence(KEYS[2])
  if not last then
    return 0
  end
  if tonumber(chosen) > last then
    local _, now_us = server_time()
    write_fence(KEYS[2], tonumber(chosen), now_us)
  end
  local run = lock.run == granted and chosen or lock.run
  redis.call('SET', KEYS[1], lock_value(lock.state, chosen, run, 0, owner), 'KEEPTTL')
  return 1
end
if kind ~= 'hash' or redis.call('TYPE', KEYS[3]).ok ~= 'zset' then
  return 0
end
local now_ms, now_us = server_time()
local grant = read_grant(KEYS[1], owner)
local expires = tonumber(redis.call('ZSCORE', KEYS[3], owner .. ':' .. granted))
if not grant or grant.token ~= granted or not expires or expires <= now_ms then
  return 0
end
local last = read_fence(KEYS[2])
if not last then
  return 0
end
if tonumber(chosen) > last then
  write_fence(KEYS[2], tonumber(chosen), now_us)
end
-- Added before the old member goes: the set never empties, and keeps its TTL.
redis.call('ZADD', KEYS[3], string.format('%.0f', expires), owner .. ':' .. chosen)
redis.call('ZREM', KEYS[3], owner .. ':' .. granted)
redis.call('HSET', KEYS[1], 'o:' .. owner, grant.kind .. ' ' .. chosen .. ' ' .. grant.slot ..
  ' ' .. grant.count)
if tonumber(chosen) > latest_shared_token(KEYS[1], 0) then
  redis.call('HSET', KEYS[1], 't', chosen)
end
return 1
