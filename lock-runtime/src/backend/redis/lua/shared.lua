-- Shared by the scripts of the shared kinds (read/write locks, semaphores, segmented locks),
-- which are appended to this text (after grant.lua). A shared kind keeps two keys, both living
-- exactly as long as the longest live lease in them (none: they go):
--   the lock key, a hash: `o:<owner>` -> `<kind> <token> <slot> <count>` per grant (kind `r`,
--   `w`, `s` for a semaphore's permit, `g` for a segmented lock's shard; token `released` once
--   min_hold_ms keeps a released grant; slot the permit or shard, 0 for readers and writers;
--   count the permits or shards asked for, 0 for readers and writers), `f` -> the kind family
--   (`rw`, `s`, `g`), `w` -> the writer's owner, `s:<slot>` -> the owner of a permit or shard,
--   `n:<count>` -> how many permits or shards asked for that count, `counts` -> those counts
--   (a semaphore's smallest wins), `t` -> the latest token granted;
--   its leases, a sorted set: `<owner>:<token>` (or `<owner>:released`) -> expiry in server ms.
-- So an attempt reads what it needs, never every grant: renewal touches the leases only.
-- Waiters queue as for a mutex, with entries `<owner> <lease ms> <kind> <count>`.

-- Kinds that may hold one key together, and how errors name them.
local FAMILY = {r = 'rw', w = 'rw', s = 's', g = 'g'}
local NAMES = {rw = 'read/write', s = 'semaphore', g = 'segmented'}

-- Why a key held by the family `held` cannot be granted as the kind `asked`, as sharing.rs
-- words it.
local function conflict(held, asked)
  return 'it is held as a ' .. NAMES[held] .. ' lock, and a ' .. NAMES[FAMILY[asked]] ..
    ' lock was requested; use one kind of lock per key'
end

-- A waiter's queue entry.
local function shared_entry(owner, lease_ms, kind, count)
  return owner .. ' ' .. lease_ms .. ' ' .. kind .. ' ' .. count
end

-- A grant as its hash field holds it: kind, token, slot, count; nil if none (or of another
-- shape).
local function read_grant(lock_key, owner)
  local value = redis.call('HGET', lock_key, 'o:' .. owner)
  if not value then
    return nil
  end
  local kind, token, slot, count = string.match(value, '^([rwsg]) (%w+) (%d+) (%d+)$')
  if not kind or (token ~= 'released' and not string.match(token, '^%d+$')) then
    return nil
  end
  return {owner = owner, kind = kind, token = token, slot = slot, count = count}
end

-- The counts asked for by the grants inside (`counts`), as a list.
local function read_counts(lock_key)
  local counts = {}
  for count in string.gmatch(redis.call('HGET', lock_key, 'counts') or '', '%d+') do
    table.insert(counts, count)
  end
  return counts
end

-- Adds `delta` to the grants that asked for `count`, keeping `counts` the list of counts with
-- a grant.
local function count_grant(lock_key, count, delta)
  local left = redis.call('HINCRBY', lock_key, 'n:' .. count, delta)
  if left > 0 and (delta < 0 or left > 1) then
    return
  end
  local counts = read_counts(lock_key)
  if left == 0 then
    redis.call('HDEL', lock_key, 'n:' .. count)
    for i, present in ipairs(counts) do
      if present == count then
        table.remove(counts, i)
        break
      end
    end
  else
    table.insert(counts, count)
  end
  redis.call('HSET', lock_key, 'counts', table.concat(counts, ' '))
end

-- Makes both keys live as long as the longest lease in them, from `now_ms`; with none left,
-- they go. So once every grant has ended, nothing is left to refuse another kind with.
local function fit_lifetime(lock_key, leases_key, now_ms)
  local last = redis.call('ZRANGE', leases_key, -1, -1, 'WITHSCORES')
  if not last[2] then
    redis.call('DEL', lock_key, leases_key)
    return
  end
  local lasts_ms = string.format('%.0f', math.max(tonumber(last[2]) - now_ms, 1))
  redis.call('PEXPIRE', lock_key, lasts_ms)
  redis.call('PEXPIRE', leases_key, lasts_ms)
end

-- Takes `grant` out of both keys (its lease member is `member`), which then live as long as
-- the longest lease left.
local function remove_grant(lock_key, leases_key, grant, member, now_ms)
  redis.call('ZREM', leases_key, member)
  redis.call('HDEL', lock_key, 'o:' .. grant.owner)
  if grant.kind == 'w' then
    redis.call('HDEL', lock_key, 'w')
  elseif grant.kind == 's' or grant.kind == 'g' then
    if redis.call('HGET', lock_key, 's:' .. grant.slot) == grant.owner then
      redis.call('HDEL', lock_key, 's:' .. grant.slot)
    end
    count_grant(lock_key, grant.count, -1)
  end
  fit_lifetime(lock_key, leases_key, now_ms)
end

-- The owner named by a lease member (`<owner>:<token>` or `<owner>:released`).
local function member_owner(member)
  return string.match(member, '^(.+):%w+$')
end

-- Writes a new grant into both keys, which then live at least until its lease ends.
local function add_grant(lock_key, leases_key, grant, expires, now_ms)
  redis.call('HSET', lock_key, 'o:' .. grant.owner, grant.kind .. ' ' .. grant.token .. ' ' ..
    grant.slot .. ' ' .. grant.count, 'f', FAMILY[grant.kind], 't', grant.token)
  redis.call('ZADD', leases_key, string.format('%.0f', expires), grant.owner .. ':' .. grant.token)
  if grant.kind == 'w' then
    redis.call('HSET', lock_key, 'w', grant.owner)
  elseif grant.kind == 's' or grant.kind == 'g' then
    redis.call('HSET', lock_key, 's:' .. grant.slot, grant.owner)
    count_grant(lock_key, grant.count, 1)
  end
  fit_lifetime(lock_key, leases_key, now_ms)
end

-- Opens the shared kind's keys at `now_ms`: checks that they are a shared lock's, drops what
-- is left of one without the other, and takes out the grants whose lease ended. An acquire
-- (`taking`) also drops a mutex's tombstone, after every check: the key serves another kind
-- from then on. Returns nil, or why the keys cannot be this lock's (another kind holds the
-- key, or they hold foreign data, which this library must not touch).
local function open_shared(lock_key, leases_key, now_ms, taking)
  local lock_type = redis.call('TYPE', lock_key).ok
  local leases_type = redis.call('TYPE', leases_key).ok
  if lock_type == 'string' then
    local lock = read_lock(lock_key)
    local tombstone = taking and lock and not holds(lock, function() return now_ms end)
      and not untimed_lock(lock_key)
    if not tombstone then
      return 'it is held as an exclusive lock, and a shared kind (read/write, semaphore, ' ..
        'segmented) was requested; use one kind of lock per key'
    end
    lock_type = 'none'
  end
  if lock_type ~= 'none' and lock_type ~= 'hash' then
    return 'it holds a ' .. lock_type .. ', not a lock'
  end
  if leases_type ~= 'none' and leases_type ~= 'zset' then
    return 'its leases `' .. leases_key .. '` hold a ' .. leases_type .. ', not what a lock keeps there'
  end
  local foreign = untimed(lock_key, 'hash') or untimed(leases_key, 'leases')
  if foreign then
    return foreign
  end
  -- A shared lock's hash always names its family; leases without their hash (it expired a
  -- moment earlier) are `<owner>:<token>`.
  if lock_type == 'hash' and redis.call('HEXISTS', lock_key, 'f') == 0 then
    return 'it holds a hash that is not a lock\'s'
  end
  local first = lock_type == 'none' and leases_type == 'zset' and
    redis.call('ZRANGE', leases_key, 0, 0)[1]
  if first and not member_owner(first) then
    return 'its leases `' .. leases_key .. '` hold a sorted set that is not a lock\'s'
  end
  if lock_type == 'none' or leases_type == 'none' then
    -- What is left of a pair whose other key expired a moment earlier.
    redis.call('DEL', lock_key, leases_key)
    return nil
  end
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', leases_key, '-inf', now_ms)) do
    local owner = member_owner(member)
    local grant = owner and read_grant(lock_key, owner)
    if grant then
      remove_grant(lock_key, leases_key, grant, member, now_ms)
    else
      redis.call('ZREM', leases_key, member)
      fit_lifetime(lock_key, leases_key, now_ms)
    end
  end
  return nil
end

-- Whether a request of `kind` (asking for `count`) may join the grants of the key now, as
-- sharing.rs's admit says: returns the slot it takes, false when it must wait, or nil and
-- why the kinds conflict. `held_back` says whether a place ahead of it in line holds it back;
-- `start` is where the search for a free slot begins. A shard in the set `exhausted_key` is
-- never taken.
local function admit(lock_key, leases_key, kind, count, held_back, start, exhausted_key)
  local family = redis.call('HGET', lock_key, 'f')
  if family and family ~= FAMILY[kind] then
    return nil, conflict(family, kind)
  end
  if held_back then
    return false
  end
  if kind == 'r' then
    return redis.call('HEXISTS', lock_key, 'w') == 0 and 0
  end
  if kind == 'w' then
    return redis.call('ZCARD', leases_key) == 0 and 0
  end
  local inside = redis.call('ZCARD', leases_key)
  local smallest, largest = count, count
  for _, asked in ipairs(read_counts(lock_key)) do
    smallest = math.min(smallest, tonumber(asked))
    largest = math.max(largest, tonumber(asked))
  end
  -- A semaphore: the smallest count wins. Either kind: when no grant inside asked for more
  -- than this request, each holds a slot below its count, and as many as the count fill it
  -- (no probing every slot of a full key).
  if (kind == 's' and inside >= smallest) or (largest == count and inside >= count) then
    return false
  end
  for offset = 0, count - 1 do
    local slot = (start + offset) % count
    if redis.call('HEXISTS', lock_key, 's:' .. slot) == 0
        and (kind ~= 'g' or redis.call('SISMEMBER', exhausted_key, slot) == 0) then
      return slot
    end
  end
  return false
end

-- Why the set of exhausted shards `exhausted_key` cannot be used (it holds something else), or
-- nil.
local function foreign_exhausted(exhausted_key)
  local found = redis.call('TYPE', exhausted_key).ok
  if found ~= 'set' and found ~= 'none' then
    return 'its set of exhausted shards `' .. exhausted_key .. '` holds a ' .. found ..
      ', not what a lock keeps there'
  end
end

-- Whether `kind` is a segmented lock whose every shard below `count` is in the set
-- `exhausted_key` (such a request is refused at once, as sharing.rs's every_shard_exhausted
-- says), or why that set cannot be read.
local function every_shard_exhausted(exhausted_key, kind, count)
  if kind ~= 'g' then
    return false
  end
  local foreign = foreign_exhausted(exhausted_key)
  if foreign or redis.call('EXISTS', exhausted_key) == 0 then
    return false, foreign
  end
  if redis.call('SCARD', exhausted_key) < count then
    return false
  end
  for shard = 0, count - 1 do
    if redis.call('SISMEMBER', exhausted_key, shard) == 0 then
      return false
    end
  end
  return true
end

-- The key's latest fencing token: the counter's, or the latest grant's if greater (the
-- counter may have expired under a long hold).
local function latest_shared_token(lock_key, last)
  return math.max(last, tonumber(redis.call('HGET', lock_key, 't') or '0'))
end

-- Grants the shared key to the waiters at the head of its queue, oldest first, while admit
-- lets each in (the first held back stops it: nobody overtakes it), each for its lease or
-- until its place would have lapsed, whichever is sooner. Returns the announcements, one
-- `granted <sha1 of the owner token> <fencing token>` per grant (and ` <slot>` for a permit or
-- a shard, which its waiter then holds without another attempt).
local function hand_off_shared(lock_key, leases_key, fence_key, queue_key, deadlines_key,
                               exhausted_key, now_ms, now_us)
  local announced = {}
  local head = line_to_hand_off(queue_key, deadlines_key, now_ms)
  local last = head and read_fence(fence_key)
  if not last then
    return announced
  end
  last = latest_shared_token(lock_key, last)
  while head do
    local owner, lease_ms, kind, count = string.match(head, '^(%S+) (%d+) ([rwsg]) (%d+)$')
    local lapses_at = tonumber(redis.call('ZSCORE', deadlines_key, head))
    if owner and lapses_at and lapses_at > now_ms then
      local slot, conflicting
      local exhausted, unreadable = every_shard_exhausted(exhausted_key, kind, tonumber(count))
      if exhausted or unreadable then
        slot, conflicting = false, 'exhausted'
      else
        slot, conflicting = admit(lock_key, leases_key, kind, tonumber(count), false, now_us,
                                  exhausted_key)
      end
      -- A waiter of a kind the key does not serve now, or whose every shard is exhausted, is
      -- skipped (its next attempt says so).
      if not slot and not conflicting then
        break
      end
      if slot then
        local token = next_token(fence_key, last, now_us)
        last = tonumber(token)
        local grant = {owner = owner, kind = kind, token = token, slot = slot, count = count}
        local lasts_ms = math.min(tonumber(lease_ms), lapses_at - now_ms)
        add_grant(lock_key, leases_key, grant, now_ms + lasts_ms, now_ms)
        local message = 'granted ' .. redis.sha1hex(owner) .. ' ' .. token
        if kind == 's' or kind == 'g' then
          message = message .. ' ' .. slot
        end
        table.insert(announced, message)
      end
    end
    -- An entry without a live place (or of another shape: a mutex's waiter) is skipped.
    redis.call('LPOP', queue_key)
    redis.call('ZREM', deadlines_key, head)
    head = redis.call('LINDEX', queue_key, 0)
  end
  return announced
end
