-- The grants of some owners that hold one lock, read without writing: what an instance's
-- earlier run left (see OperatorBackend::grants_of_owners).
-- KEYS[1] lock key, KEYS[5] a shared kind's leases (the operator's keys)
-- ARGV[1] the text the owner tokens start with, ARGV[2] a text they must not start with
-- ('' for none)
-- Returns the tag (see owner_tag) and fencing token of each grant, flat: a mutex's holder, or
-- each live grant of a shared kind (all of them). A grant kept after its release
-- (min_hold_ms) is left out; so is foreign data.
local function meant(owner)
  local starts = string.sub(owner, 1, #ARGV[1]) == ARGV[1]
  local excepted = ARGV[2] ~= '' and string.sub(owner, 1, #ARGV[2]) == ARGV[2]
  return starts and not excepted
end

-- Whether a shared kind's keys are a lock's, as inspect.lua reads them (describe_shared).
local function shared_lock(lock_key, leases_key)
  return redis.call('HEXISTS', lock_key, 'f') == 1 and redis.call('TYPE', leases_key).ok == 'zset'
    and not untimed(lock_key, 'hash') and not untimed(leases_key, 'leases')
end

local reply = {}
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  local lock = read_lock(KEYS[1])
  if lock and HELD[lock.state] and meant(lock.owner) and not untimed_lock(KEYS[1]) then
    reply = {owner_tag(lock.owner), lock.token}
  end
elseif kind == 'hash' and shared_lock(KEYS[1], KEYS[5]) then
  local after = '(' .. string.format('%.0f', server_time())
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], after, '+inf')) do
    local owner = member_owner(member)
    local grant = owner and meant(owner) and read_grant(KEYS[1], owner)
    if grant and grant.token ~= 'released' then
      table.insert(reply, owner_tag(owner))
      table.insert(reply, grant.token)
    end
  end
end
return reply
