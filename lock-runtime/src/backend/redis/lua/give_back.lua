-- Redlock: take back a grant that formed no majority, without a word: no announcement (it was
-- no lock anybody waited for, and announcing it would wake every waiter into another attempt)
-- and no memory of a release (the owner released no lock).
-- KEYS[1] lock key; ARGV[1] owner token
-- Returns 1 if a grant of the owner was deleted, 0 otherwise.
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'string' and string.sub(holder, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
