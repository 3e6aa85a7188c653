-- Mark the shard of a segmented lock's grant exhausted, if the grant still holds it (see
-- shared.lua): every later acquisition skips it until a refill takes the mark out.
-- KEYS[1] lock key (a hash), KEYS[2] the leases, KEYS[3] the shards marked exhausted (a set)
-- ARGV[1] owner token, ARGV[2] the grant's fencing token, ARGV[3] its shard
-- Returns 1 once marked, 0 if the grant does not hold the shard (any more), {2, why} if the
-- set holds something else.
local now_ms = server_time()
local foreign = foreign_exhausted(KEYS[3])
if foreign then
  return {2, foreign}
end
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return 0
end
local grant = read_grant(KEYS[1], ARGV[1])
if not grant or grant.kind ~= 'g' or grant.token ~= ARGV[2] or grant.slot ~= ARGV[3] then
  return 0
end
local expires = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1] .. ':' .. grant.token))
if not expires or expires <= now_ms then
  return 0
end
redis.call('SADD', KEYS[3], ARGV[3])
return 1
