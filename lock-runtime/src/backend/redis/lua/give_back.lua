-- Redlock: take back a grant that formed no majority, without a word: no announcement (it was
-- no lock anybody waited for, and announcing it would wake every waiter into another attempt)
-- and no memory of a release (the owner released no lock). Also taken back: a grant that
-- `min_replicas` did not see replicated in time.
-- KEYS[1] lock key, KEYS[2] the leases of a shared kind; ARGV[1] owner token, ARGV[2] ms to keep
-- a mutex's tombstone
-- The lock key is a mutex's string (see mutex.lua), released if the owner holds it, or a
-- shared kind's hash, from which the owner's grant is taken with its lease (see shared.lua).
-- Anything else is not the owner's grant.
-- Returns 1 if a grant of the owner was deleted, 0 otherwise.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  -- Left as a tombstone that names no releaser: it keeps the last token and the run, so that
  -- a resent release of the grant before this one still finds it released. This grant was
  -- never a lock its owner held, so no release of it is ever sent (see mutex.lua). Waiters
  -- stay marked.
  local lock = read_lock(KEYS[1])
  if lock and HELD[lock.state] and lock.owner == ARGV[1] then
    local state = lock.state == 'w' and 'q' or 'r'
    redis.call('SET', KEYS[1], lock_value(state, lock.token, lock.run, 0, ''), 'PX', ARGV[2])
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
