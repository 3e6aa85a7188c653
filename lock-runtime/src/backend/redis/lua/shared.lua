-- Shared by the scripts of the shared kinds (read/write locks, semaphores, segmented locks),
-- which are appended to this text (after grant.lua). Their lock key is a hash: one field per
-- grant, named by its owner token, holding `<kind> <token> <slot> <count> <expires ms>`:
-- kind `r`, `w`, `s` (a semaphore's permit) or `g` (a segmented lock's shard); token
-- `released` once min_hold_ms keeps a released grant; slot the permit or shard (0 for readers
-- and writers); count the permits or shards the request asked for (0 for readers and
-- writers); expiry in server ms. The hash lives as long as its longest lease. Waiters queue as
-- for a mutex, with entries `<owner> <lease ms> <kind> <count>`.

-- Kinds that may hold one key together.
local FAMILY = {r = 'rw', w = 'rw', s = 's', g = 'g'}
local NAMES = {rw = 'read/write', s = 'semaphore', g = 'segmented'}

-- Why a key held by `held` (a kind) cannot be granted as `asked`, as sharing.rs words it.
local function conflict(held, asked)
  return 'it is held as a ' .. NAMES[FAMILY[held]] .. ' lock, and a ' .. NAMES[FAMILY[asked]] ..
    ' lock was requested; use one kind of lock per key'
end

-- A waiter's queue entry.
local function shared_entry(owner, lease_ms, kind, count)
  return owner .. ' ' .. lease_ms .. ' ' .. kind .. ' ' .. count
end

-- Reads the live grants of the hash `lock_key` at `now_ms`, deleting those whose lease
-- ended. Returns them (a list of {owner, kind, token, slot, count, expires}) and a map from
-- owner to grant, or nil and why the key cannot be a shared lock's.
local function read_shared(lock_key, now_ms)
  local kind = redis.call('TYPE', lock_key).ok
  if kind == 'none' then
    return {}, {}
  end
  if kind == 'string' then
    return nil, 'it is held as an exclusive lock, and a shared kind (read/write, semaphore, ' ..
      'segmented) was requested; use one kind of lock per key'
  end
  if kind ~= 'hash' then
    return nil, 'it holds a ' .. kind .. ', not a lock'
  end
  if redis.call('PTTL', lock_key) == -1 then
    return nil, 'it holds a hash without a TTL, which no lock leaves behind'
  end
  local fields = redis.call('HGETALL', lock_key)
  local grants, by_owner = {}, {}
  for i = 1, #fields, 2 do
    local owner = fields[i]
    local grant_kind, token, slot, count, expires =
      string.match(fields[i + 1], '^([rwsg]) (%w+) (%d+) (%d+) (%d+)$')
    if not grant_kind then
      return nil, 'it holds a hash that is not a lock\'s'
    end
    expires = tonumber(expires)
    if expires <= now_ms then
      redis.call('HDEL', lock_key, owner)
    else
      local grant = {owner = owner, kind = grant_kind, token = token, slot = tonumber(slot),
        count = tonumber(count), expires = expires}
      table.insert(grants, grant)
      by_owner[owner] = grant
    end
  end
  return grants, by_owner
end

-- Writes `grant` into the hash, which then lives at least until the grant's lease ends.
local function store_shared(lock_key, grant, now_ms)
  redis.call('HSET', lock_key, grant.owner, grant.kind .. ' ' .. grant.token .. ' ' ..
    grant.slot .. ' ' .. grant.count .. ' ' .. string.format('%.0f', grant.expires))
  local lasts_ms = grant.expires - now_ms
  if redis.call('PTTL', lock_key) < lasts_ms then
    redis.call('PEXPIRE', lock_key, string.format('%.0f', lasts_ms))
  end
end

-- Whether a request of `kind` (asking for `count`) may join `grants`, as sharing.rs's admit
-- says: returns the slot it takes, false when it must wait, or nil and why the kinds
-- conflict. `ahead` lists the kinds of the places ahead of it in line (`x` for an entry of
-- another shape); `start` is where the search for a free slot begins.
local function admit(kind, count, grants, ahead, fair, start)
  for _, grant in ipairs(grants) do
    if FAMILY[grant.kind] ~= FAMILY[kind] then
      return nil, conflict(grant.kind, kind)
    end
  end
  if fair and #ahead > 0 then
    return false
  end
  if kind == 'r' then
    for _, waiting in ipairs(ahead) do
      if waiting == 'w' then
        return false
      end
    end
    for _, grant in ipairs(grants) do
      if grant.kind == 'w' then
        return false
      end
    end
    return 0
  end
  if kind == 'w' then
    return #grants == 0 and 0
  end
  local smallest, taken = count, {}
  for _, grant in ipairs(grants) do
    smallest = math.min(smallest, grant.count)
    taken[grant.slot] = true
  end
  if #grants >= smallest then
    return false
  end
  for offset = 0, count - 1 do
    local slot = (start % count + offset) % count
    if not taken[slot] then
      return slot
    end
  end
  return false
end

-- The kind and count of a queue entry, or 'x' for an entry of another shape.
local function entry_kind(entry)
  local owner, lease_ms, kind, count = string.match(entry, '^(%S+) (%d+) ([rwsg]) (%d+)$')
  if not owner then
    return 'x'
  end
  return kind, tonumber(count), owner, tonumber(lease_ms)
end

-- The greatest token of `grants` and `last` (the counter may have expired under a long hold).
local function latest_token(grants, last)
  for _, grant in ipairs(grants) do
    local token = tonumber(grant.token)
    if token and token > last then
      last = token
    end
  end
  return last
end

-- Grants the shared key to the waiters at the head of its queue, oldest first, while admit
-- lets each in (the first held back stops it: nobody overtakes it), each for its lease or
-- until its place would have lapsed, whichever is sooner. Returns the announcements, one
-- `granted <sha1 of the owner token> <fencing token>` per grant.
local function hand_off_shared(lock_key, fence_key, queue_key, deadlines_key, grants, now_ms,
                               now_us)
  local announced = {}
  if redis.call('EXISTS', queue_key) == 0 then
    return announced
  end
  local lapsed, head = read_queue(queue_key, deadlines_key, now_ms)
  if not lapsed or not head then
    return announced
  end
  local last = read_fence(fence_key)
  if not last then
    return announced
  end
  last = latest_token(grants, last)
  head = prune_queue(queue_key, deadlines_key, lapsed, head)
  while head do
    local kind, count, owner, lease_ms = entry_kind(head)
    local lapses_at = tonumber(redis.call('ZSCORE', deadlines_key, head))
    local live = owner and lapses_at and lapses_at > now_ms
    if live then
      local slot = admit(kind, count, grants, {}, false, now_us)
      if not slot then
        break
      end
      local token = next_token(fence_key, last, now_us)
      last = tonumber(token)
      local grant = {owner = owner, kind = kind, token = token, slot = slot, count = count,
        expires = now_ms + math.min(lease_ms, lapses_at - now_ms)}
      store_shared(lock_key, grant, now_ms)
      table.insert(grants, grant)
      table.insert(announced, 'granted ' .. redis.sha1hex(owner) .. ' ' .. token)
    end
    -- An entry without a live place (or of another shape) is skipped.
    redis.call('LPOP', queue_key)
    redis.call('ZREM', deadlines_key, head)
    head = redis.call('LINDEX', queue_key, 0)
  end
  return announced
end
