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

local reply = {}
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'string' then
  local owner, token = string.match(holder, '^(.*):(%d+)$')
  if owner and meant(owner) then
    reply = {owner_tag(owner), token}
  end
elseif type(holder) == 'table' and redis.call('TYPE', KEYS[1]).ok == 'hash'
    and redis.call('TYPE', KEYS[5]).ok == 'zset' then
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
