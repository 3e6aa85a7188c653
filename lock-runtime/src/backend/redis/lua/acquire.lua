-- Acquire, or recognise a retry by the same owner.
-- KEYS[1] lock key, KEYS[2] fencing counter key (same hash slot)
-- ARGV[1] owner token, ARGV[2] lease in ms
-- Returns {1, token} when granted, {0, remaining ms} when another owner holds the key.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  local again = grant_again(KEYS[1], KEYS[2], ARGV[2])
  if again then
    return again
  end
elseif holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
