-- Redlock: take back a grant that formed no majority, without a word: no announcement (it was
-- no lock anybody waited for, and announcing it would wake every waiter into another attempt)
-- and no memory of a release (the owner released no lock). Also taken back: a grant that
-- `min_replicas` did not see replicated in time.
-- KEYS[1] lock key, KEYS[2] the leases of a shared kind; ARGV[1] owner token
-- The lock key is a mutex's string (`<owner>:<token>`), deleted if the owner holds it, or a
-- shared kind's hash, from which the owner's grant is taken with its lease (see shared.lua).
-- Anything else is not the owner's grant.
-- Returns 1 if a grant of the owner was deleted, 0 otherwise.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  local holder = redis.call('GET', KEYS[1])
  if string.sub(holder, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
    redis.call('DEL', KEYS[1])
    return 1
  end
elseif kind == 'hash' and redis.call('TYPE', KEYS[2]).ok == 'zset' then
  local grant = read_grant(KEYS[1], ARGV[1])
  if grant then
    local now_ms = server_time()
    remove_grant(KEYS[1], KEYS[2], grant, ARGV[1] .. ':' .. grant.token, now_ms)
    return 1
  end
end
return 0
