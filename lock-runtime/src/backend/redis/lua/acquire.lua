-- Acquire, or recognise a retry by the same owner.
-- KEYS[1] lock key, KEYS[2] fencing counter key, KEYS[3] turn reservation (same hash slot)
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] ms to reserve the next free turn for
-- this owner if the key is held (a starving waiter), 0 for none
-- Returns {1, token} when granted, {0, remaining ms} when another owner holds the key or
-- a starving waiter has reserved its next free turn, {2, why} when the key or one kept next
-- to it holds something that is not a lock's. Everything is read before anything is written.
local reply, holder = read_holder(KEYS[1], ARGV[1], ARGV[2])
if reply then
  return reply
end
local reserved, foreign = read_helper('GET', KEYS[3], 'turn reservation')
if not foreign and reserved then
  foreign = untimed(KEYS[3], 'turn reservation')
end
if foreign then
  return {2, foreign}
end
if not holder then
  if reserved and reserved ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[3])}
  end
  local last, foreign_fence = read_fence(KEYS[2])
  if foreign_fence then
    return {2, foreign_fence}
  end
  if reserved then
    redis.call('DEL', KEYS[3])
  end
  return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], last)
end
if ARGV[3] ~= '0' and (not reserved or reserved == ARGV[1]) then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
end
return {0, redis.call('PTTL', KEYS[1])}
