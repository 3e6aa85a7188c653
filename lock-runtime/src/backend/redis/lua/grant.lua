-- Shared by the scripts that read or grant locks, which are appended to this text.
-- Fencing tokens travel as strings: Lua numbers are doubles, exact below 2^53, but Lua
-- prints them with 14 significant digits.

-- How long a fencing counter outlives the token it holds, in ms of server time. Tokens are
-- max(last + 1, server time in µs), so once the clock has passed the last token the counter
-- is not needed for tokens to keep increasing; keeping it this much longer also keeps them
-- increasing across a server clock step back of up to this much.
local FENCE_RETENTION_MS = 60000

-- Reads a key that a lock keeps next to its lock key (`what` names it for the message) with
-- `command`. Returns the value, or nil and why the key cannot be this lock's (it holds
-- another type: another program's data, which this library must not touch).
local function read_helper(command, key, what, ...)
  local value = redis.pcall(command, key, ...)
  if type(value) == 'table' and value.err then
    return nil, 'its ' .. what .. ' `' .. key .. '` holds a ' .. redis.call('TYPE', key).ok ..
      ', not what a lock keeps there'
  end
  return value
end

-- The last fencing token of the lock (0 if none), or nil and why the counter is foreign.
local function read_fence(fence_key)
  local last, foreign = read_helper('GET', fence_key, 'fencing counter')
  if foreign then
    return nil, foreign
  end
  if not last then
    return 0
  end
  -- Tokens are exact below 2^53 (Lua numbers are doubles). A counter without a TTL is kept:
  -- versions before counters expired wrote them so.
  if not string.match(last, '^%d+$') or tonumber(last) >= 9007199254740992 then
    return nil, 'its fencing counter `' .. fence_key .. '` holds a string that is not a token'
  end
  return tonumber(last)
end

-- Why `key`, kept next to a lock and always written with a TTL, cannot be this lock's: it
-- exists without one. nil if it has a TTL or does not exist.
local function untimed(key, what)
  if redis.call('PTTL', key) == -1 then
    return 'its ' .. what .. ' `' .. key .. '` has no TTL, which no lock leaves behind'
  end
  return nil
end

-- The server's clock, in ms and in µs.
local function server_time()
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  return seconds * 1000 + math.floor(micros / 1000), seconds * 1000000 + micros
end

-- Writes `token_us` into the fencing counter at server time `now_us` and returns it as text.
-- The counter expires FENCE_RETENTION_MS after the server time the token stands for, and at
-- least that long from now (a token Redlock's client proposed may be below this clock); one
-- write, where SET and PEXPIREAT were two.
local function write_fence(fence_key, token_us, now_us)
  local token = string.format('%.0f', token_us)
  local retention_ms = math.max(math.floor(token_us / 1000) - math.floor(now_us / 1000), 0) +
    FENCE_RETENTION_MS
  redis.call('SET', fence_key, token, 'PX', string.format('%.0f', retention_ms))
  return token
end

-- The token of a new grant of a shared kind after the last token `last`, at server time
-- `now_us`, written to the fencing counter: it exceeds both the last one and the server clock
-- in microseconds, so it keeps increasing after a restart that lost the counter (unless the
-- clock steps back). Redlock's client gives `floor_us`, one proposal for every master, in
-- place of the server clock: masters whose counters agree then grant one token, which needs
-- no write-back.
local function next_token(fence_key, last, now_us, floor_us)
  return write_fence(fence_key, math.max(last + 1, floor_us or now_us), now_us)
end

-- Puts `entry` at the back of the key's queue, or renews its place there, for `place_ms`
-- from `now_ms`. The queue vanishes once the last of its waiters' places has lapsed.
local function keep_place(queue_key, deadlines_key, entry, now_ms, place_ms)
  -- ZADD counts the entries it added: a new place goes to the back of the line.
  if redis.call('ZADD', deadlines_key, now_ms + tonumber(place_ms), entry) == 1 then
    redis.call('RPUSH', queue_key, entry)
  end
  local latest = redis.call('ZRANGE', deadlines_key, -1, -1, 'WITHSCORES')
  local lasts_ms = math.max(tonumber(latest[2]) - now_ms, 1)
  redis.call('PEXPIRE', queue_key, lasts_ms)
  redis.call('PEXPIRE', deadlines_key, lasts_ms)
end

-- A waiter's entry in a key's queue and in its deadlines: its owner token and its lease,
-- which bounds the grant a release hands it.
local function queue_entry(owner, lease_ms)
  return owner .. ' ' .. lease_ms
end

-- Reads the key's queue: the entries whose place lapsed by `now_ms` and the entry at its
-- head (false if none), or nil and why the queue keys cannot be a lock's. Reads nothing
-- more when neither exists (every uncontended request).
local function read_queue(queue_key, deadlines_key, now_ms)
  if redis.call('EXISTS', queue_key, deadlines_key) == 0 then
    return {}, false
  end
  local lapsed, foreign = read_helper('ZRANGEBYSCORE', deadlines_key, 'queue deadlines', '-inf', now_ms)
  local head
  if not foreign then
    head, foreign = read_helper('LINDEX', queue_key, 'queue', 0)
  end
  foreign = foreign or untimed(deadlines_key, 'queue deadlines') or untimed(queue_key, 'queue')
  if foreign then
    return nil, foreign
  end
  return lapsed, head or false
end

-- Takes the entries in `lapsed` out of the queue (their waiters died, or gave up without a
-- word); returns the head left, or false.
local function prune_queue(queue_key, deadlines_key, lapsed, head)
  if #lapsed == 0 then
    return head
  end
  for _, gone in ipairs(lapsed) do
    redis.call('LREM', queue_key, 0, gone)
    redis.call('ZREM', deadlines_key, gone)
  end
  return redis.call('LINDEX', queue_key, 0)
end

-- The head of the key's line for a hand-off at `now_ms`, lapsed places taken out; nil when
-- nobody waits, or when the queue keys are not a lock's (then nothing is handed over).
local function line_to_hand_off(queue_key, deadlines_key, now_ms)
  local lapsed, head = read_queue(queue_key, deadlines_key, now_ms)
  if not lapsed then
    return nil
  end
  return prune_queue(queue_key, deadlines_key, lapsed, head) or nil
end
