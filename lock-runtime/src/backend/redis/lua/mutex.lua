-- Shared by the scripts that read or write a mutex, which are appended to this text (after
-- grant.lua). A mutex is one key: `<state>:<token>:<run>:<free at>:<owner>` with a TTL.
--   state `h`: held, and nobody waits in line: its release writes the lock key alone.
--         `w`: held, and somebody took a place in line (its attempt set it): the release
--              reads the line and hands the key on.
--         `r`: released by `owner` (empty: forced by an operator); free from `free at`
--              (server ms, 0: at once) on: min_hold_ms keeps a released key that long.
--         `q`: as `r`, with waiters in line (they came while min_hold_ms kept the key).
--   token: the fencing token of the grant (released: of the last grant).
--   run:   the token of the first grant of an unbroken series of grants, each one taken
--          after its predecessor's release: a grant whose token is in [run, token) was
--          released, so a release sent again learns it released, however busy the key was
--          since. A grant over a missing key (the last lease expired, or the tombstone
--          did) starts a run; a forced release breaks it.
-- A released key (a tombstone) lives as long as a resend of its release can take to arrive,
-- or min_hold_ms if longer: it carries the last token to the next grant, which takes the
-- greater of that token + 1 and the server clock in µs (or Redlock's proposal), so that the
-- fencing counter needs no key of its own off Redlock: tokens keep increasing after a
-- tombstone expired unless the clock steps back. Waiters queue in the keys next to the lock (grant.lua) only while a
-- state says so, so that an uncontended acquire and release touch the lock key alone.

local HELD = {h = true, w = true}
local RELEASED = {r = true, q = true}

-- Why a value shaped as a lock's but without a TTL cannot be one of this library's: every
-- lease and every tombstone has one, so nobody would ever release it.
local UNTIMED_LOCK = 'it holds a string without a TTL, which no lock leaves behind'

-- UNTIMED_LOCK where the value at `lock_key` has no TTL; else nil.
local function untimed_lock(lock_key)
  if redis.call('PTTL', lock_key) == -1 then
    return UNTIMED_LOCK
  end
  return nil
end

-- Reads the mutex at `lock_key`. Returns the lock (a table of its fields), false when the key
-- is missing, or nil and why the key is not a mutex of this library (another kind's grants,
-- another program's data: nobody would ever release it).
local function read_lock(lock_key)
  local value = redis.pcall('GET', lock_key)
  if type(value) == 'table' and value.err then
    local kind = redis.call('TYPE', lock_key).ok
    if kind == 'hash' then
      return nil, 'it holds a hash: the grants of a read/write lock, a semaphore or a ' ..
        'segmented lock of this key (use one kind of lock per key), or another program\'s data'
    end
    return nil, 'it holds a ' .. kind .. ', not a lock'
  end
  if not value then
    return false
  end
  local state, token, run, free_at, owner = string.match(value, '^([hwrq]):(%d+):(%d+):(%d+):(.*)$')
  -- Tokens are exact below 2^53 (Lua numbers are doubles).
  if not state or tonumber(token) >= 9007199254740992 or tonumber(run) >= 9007199254740992 then
    return nil, untimed_lock(lock_key) or
      'it holds a string that is not a lock\'s (`<state>:<token>:<run>:<free at>:<owner>`)'
  end
  return {state = state, token = token, run = run, free_at = tonumber(free_at), owner = owner}
end

-- The value of a mutex.
local function lock_value(state, token, run, free_at, owner)
  return state .. ':' .. token .. ':' .. run .. ':' .. string.format('%.0f', free_at) .. ':' .. owner
end

-- Whether `lock` (read at `now_ms`, a function that reads the clock once) holds the key: a
-- grant, or a release that min_hold_ms keeps.
local function holds(lock, now_ms)
  if not lock then
    return false
  end
  if HELD[lock.state] then
    return true
  end
  return lock.free_at > 0 and lock.free_at > now_ms()
end

-- A clock read at most once per call: the server's time in ms and in µs.
local function lazy_clock()
  local ms, us
  return function()
    if not ms then
      ms, us = server_time()
    end
    return ms, us
  end
end

-- The token of a grant over `lock` (false: a missing key) after `counted` (Redlock's fencing
-- counter's token, or 0): greater than both, and at least the server clock in µs, or Redlock's
-- proposal in its place. The clock counts also where a token is left: a failover or a
-- restart may have lost grants later than the one the key shows.
local function next_lock_token(lock, counted, floor_us, clock)
  local last = math.max(lock and tonumber(lock.token) or 0, counted)
  if floor_us then
    return math.max(last + 1, floor_us)
  end
  local _, now_us = clock()
  return math.max(last + 1, now_us)
end

-- Grants the key to `owner` for `lease_ms` over `lock` (false: a missing key), continuing its
-- run where it was released (else beginning one); `waiting` keeps the waiter flag. On Redlock
-- (`floor_us`, its client's proposal) the token also goes to the fencing counter `fenced`
-- (its key, and the token it held): a master's tokens follow its clients' clocks there, and
-- a lease that expires leaves no tombstone, so the counter carries them for a minute
-- (grant.lua). Returns the token.
local function grant_lock(lock_key, lock, owner, lease_ms, waiting, clock, floor_us, fenced)
  local token_us = next_lock_token(lock, fenced and fenced.last or 0, floor_us, clock)
  local token
  if fenced then
    local _, now_us = clock()
    token = write_fence(fenced.key, token_us, now_us)
  else
    token = string.format('%.0f', token_us)
  end
  local run = lock and RELEASED[lock.state] and lock.run or token
  redis.call('SET', lock_key, lock_value(waiting and 'w' or 'h', token, run, 0, owner), 'PX', lease_ms)
  return token
end

-- Leaves the tombstone of a released mutex. A server out of memory refuses the write where
-- the release runs as an EVALSHA script (a function may write there): the key is deleted
-- then, and only the memory of the release and the last token are lost.
local function leave_tombstone(lock_key, released, run, releaser, memory_ms)
  local left = redis.pcall('SET', lock_key, lock_value('r', released.token, run, 0, releaser),
    'PX', memory_ms)
  if type(left) == 'table' and left.err then
    redis.call('DEL', lock_key)
  end
end

-- Hands a released mutex on, as its release or an operator's forced release does: grants it
-- to the oldest waiter whose place lasts where a state says one may wait (`w`, `q`: for its
-- lease, or until its place would have lapsed, whichever is sooner: the waiter renews it from
-- there), or else leaves a tombstone of `released` (the lock as it was; `releaser` the owner
-- remembered, '' for none; `run` the run to carry on) for `memory_ms`. Announces on `channel`
-- with `publish` (`PUBLISH`, or `SPUBLISH` on a Redis Cluster) `granted <sha1 of the new
-- owner's token> <fencing token>` (never the token: whoever has it can release the lock),
-- else `released <fencing token of the grant released>`. Through pcall: a user whose ACL
-- grants no channels (Redis 7's default) must still release; its waiters poll. Returns the
-- message.
local function hand_on(lock_key, queue_key, deadlines_key, released, releaser, run, channel,
                       publish, memory_ms, clock)
  local message
  if released.state == 'w' or released.state == 'q' then
    local tombstone = {state = 'r', token = released.token, run = run}
    local now_ms = clock()
    local head = line_to_hand_off(queue_key, deadlines_key, now_ms)
    while head and not message do
      redis.call('LPOP', queue_key)
      local lapses_at = redis.call('ZSCORE', deadlines_key, head)
      redis.call('ZREM', deadlines_key, head)
      local owner, lease_ms = string.match(head, '^(%S+) (%d+)$')
      -- An entry without a live place (or of another shape: a shared kind's waiter, left from
      -- before the key served a mutex) is skipped.
      if owner and lapses_at and tonumber(lapses_at) > now_ms then
        lease_ms = math.min(tonumber(lease_ms), tonumber(lapses_at) - now_ms)
        local waiting = redis.call('EXISTS', queue_key) == 1
        local token = grant_lock(lock_key, tombstone, owner, string.format('%.0f', lease_ms), waiting,
          clock)
        message = 'granted ' .. redis.sha1hex(owner) .. ' ' .. token
      else
        head = redis.call('LINDEX', queue_key, 0)
      end
    end
  end
  if not message then
    leave_tombstone(lock_key, released, run, releaser, memory_ms)
    message = 'released ' .. released.token
  end
  redis.pcall(publish, channel, message)
  return message
end
