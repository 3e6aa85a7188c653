-- Redlock: raise a fresh grant's fencing token to the one chosen across the masters (the
-- greatest any of them granted), so that every master of the quorum keeps a counter at least
-- that high and a later quorum, which shares one of them, grants a greater one.
-- KEYS[1] lock key, KEYS[2] fencing counter
-- ARGV[1] owner token, ARGV[2] the token this master granted, ARGV[3] the chosen token
-- The lock key is a mutex's string (`<owner>:<token>`) or a shared kind's hash, whose field
-- named by the owner holds `<kind> <token> <slot> <count> <expires ms>` (see shared.lua).
-- Returns 1 when the grant carries the chosen token, 0 when it is gone (expired, released,
-- or granted anew) or the counter holds something that is not a lock's.
local owner, granted, chosen = ARGV[1], ARGV[2], ARGV[3]
local now_ms, now_us = server_time()
local kind = redis.call('TYPE', KEYS[1]).ok
local grant_kind, rest, expires
if kind == 'string' then
  if redis.call('GET', KEYS[1]) ~= owner .. ':' .. granted then
    return 0
  end
elseif kind == 'hash' then
  local grant = redis.call('HGET', KEYS[1], owner) or ''
  grant_kind, rest, expires = string.match(grant, '^(%a) ' .. granted .. ' (%d+ %d+ (%d+))$')
  if not grant_kind or tonumber(expires) <= now_ms then
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
  redis.call('HSET', KEYS[1], owner, grant_kind .. ' ' .. chosen .. ' ' .. rest)
end
return 1
