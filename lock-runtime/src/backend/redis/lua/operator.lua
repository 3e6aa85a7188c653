-- Shared by the operator's scripts (inspection, forced release), which are appended to this
-- text (after grant.lua): how they name what a lock key holds without revealing owner tokens
-- (whoever has one can release the lock).

-- The tag of an owner token: the first 16 hex digits of its SHA-1, as release messages name
-- the owner a key was handed to.
local function owner_tag(owner)
  return string.sub(redis.sha1hex(owner), 1, 16)
end

-- What a mutex (see mutex.lua) says at `now_ms`: 'held', its owner's tag, the fencing token
-- of the grant and the ms left of its lease; 'kept', the owner's tag, '' and the ms left for
-- a key that min_hold_ms keeps after its release; or 'free' ('', '', -2) for a tombstone.
local function describe_holder(lock_key, lock, now_ms)
  if HELD[lock.state] then
    return 'held', owner_tag(lock.owner), lock.token, redis.call('PTTL', lock_key)
  end
  if lock.free_at > now_ms and lock.owner ~= '' then
    return 'kept', owner_tag(lock.owner), '', math.floor(lock.free_at - now_ms)
  end
  return 'free', '', '', -2
end

-- The grants of a shared kind's keys (see shared.lua), read without writing: how many live
-- grants hold the key, and a list of the first `limit` by lease end, each as its owner's tag,
-- kind (r, w, s, g), token ('' once released and kept by min_hold_ms), slot, the count its
-- owner asked for, and ms left; and the ms left of the longest lease of a grant (of all grants,
-- shown or not). Or nil and why the keys are not a shared lock's.
local function describe_shared(lock_key, leases_key, now_ms, limit)
  if redis.call('HEXISTS', lock_key, 'f') == 0 then
    return nil, 'it holds a hash that is not a lock\'s'
  end
  local leases_type = redis.call('TYPE', leases_key).ok
  if leases_type ~= 'none' and leases_type ~= 'zset' then
    return nil, 'its leases `' .. leases_key .. '` hold a ' .. leases_type ..
      ', not what a lock keeps there'
  end
  local foreign = untimed(lock_key, 'hash') or untimed(leases_key, 'leases')
  if foreign then
    return nil, foreign
  end
  local after = '(' .. string.format('%.0f', now_ms)
  local holders = redis.call('ZCOUNT', leases_key, after, '+inf')
  local live = redis.call('ZRANGEBYSCORE', leases_key, after, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  local grants = {}
  for i = 1, #live, 2 do
    local owner = member_owner(live[i])
    local grant = owner and read_grant(lock_key, owner)
    if grant then
      local token = grant.token == 'released' and '' or grant.token
      for _, field in ipairs({owner_tag(owner), grant.kind, token, grant.slot, grant.count,
                              math.floor(tonumber(live[i + 1]) - now_ms)}) do
        table.insert(grants, field)
      end
    else
      -- A lease without its grant holds nothing (the next attempt drops it).
      holders = holders - 1
    end
  end
  -- The longest lease with its grant, among the last `limit` (past those, the last lease: the
  -- keys live that long).
  local last = redis.call('ZREVRANGEBYSCORE', leases_key, '+inf', after, 'WITHSCORES', 'LIMIT', 0, limit)
  local longest_at = last[2]
  for i = 1, #last, 2 do
    local owner = member_owner(last[i])
    if owner and read_grant(lock_key, owner) then
      longest_at = last[i + 1]
      break
    end
  end
  local longest = longest_at and math.max(math.floor(tonumber(longest_at) - now_ms), 0) or 0
  return holders, grants, longest
end
