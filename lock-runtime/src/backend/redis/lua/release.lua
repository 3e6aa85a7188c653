-- Release the lock only if ARGV[1] still owns it (a holder whose lease expired must not delete
-- the next holder's lock), and take back whatever ARGV[1] left as a waiter: its place in the
-- fair queue, its reservation of the next turn.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue deadlines, KEYS[4] turn reservation,
-- KEYS[5] who released the lock last (kept for RELEASE_MEMORY_MS)
-- ARGV[1] owner token; ARGV[2] ms to keep the key (min_hold_ms), 0 to delete;
-- ARGV[3] the channel on which waiters hear of releases (`released`, or `released <sha1>` naming
-- the waiter whose turn it is; `left` when a waiter that may have had the turn leaves).
-- Returns 1 if released, 0 if another owner (or foreign data) holds the key, -1 if nobody
-- does. The key holds `<owner>:<token>`; any grant of the owner is released. A kept key
-- (min_hold_ms) is marked `<owner>:released`, so that a renewal already on its way cannot
-- extend it again, and a resent release still finds it ours; a deleted one leaves its owner
-- in KEYS[5] for a while, so that a release sent again after its reply was lost learns that
-- the first one released it (and not that the key vanished some other way). Keys next to the lock
-- go through pcall: foreign data there must not keep the lock from being released. PUBLISH
-- too: a user whose ACL grants no channels (Redis 7's default) must still release; its
-- waiters poll.
-- How long KEYS[5] remembers the last release: longer than a resend takes.
local RELEASE_MEMORY_MS = 30000

-- 'released', naming the waiter whose turn it is now, if any, by the SHA-1 of its owner
-- token (never the token): the fair queue's head while its place lasts (a lapsed head names
-- nobody: the next attempt prunes it) and no other waiter reserved the turn, else the waiter
-- that reserved the turn. Only that waiter can take the key now, so only it needs to wake.
local function released_message(reserved)
  local next
  local head = redis.pcall('LINDEX', KEYS[2], 0)
  if type(head) == 'string' then
    local lapses_at = redis.pcall('ZSCORE', KEYS[3], head)
    if type(lapses_at) == 'string' then
      local time = redis.call('TIME')
      local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
      -- A waiter that reserved the turn may take the key as well (plain requests do not
      -- look at the queue): then both must hear of it, and the message names nobody.
      if tonumber(lapses_at) > now_ms and (type(reserved) ~= 'string' or reserved == head) then
        next = head
      end
    end
  elseif type(reserved) == 'string' then
    next = reserved
  end
  if next then
    return 'released ' .. redis.sha1hex(next)
  end
  return 'released'
end

local left = false
local removed = redis.pcall('LREM', KEYS[2], 0, ARGV[1])
if type(removed) == 'number' and removed > 0 then
  redis.pcall('ZREM', KEYS[3], ARGV[1])
  left = true
end
local reserved = redis.pcall('GET', KEYS[4])
if reserved == ARGV[1] then
  redis.call('DEL', KEYS[4])
  left = true
  reserved = nil
end
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] .. ':released' then
  return 1
end
local ours = type(holder) == 'string' and string.sub(holder, 1, #ARGV[1] + 1) == ARGV[1] .. ':'
if not ours then
  if redis.pcall('GET', KEYS[5]) == ARGV[1] then
    return 1
  end
  if holder then
    return 0
  end
  -- A waiter that leaves may have been the one whose turn it was.
  if left then
    redis.pcall('PUBLISH', ARGV[3], 'left')
  end
  return -1
end
if ARGV[2] == '0' then
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', ARGV[3], released_message(reserved))
  -- Not over another program's data: an empty key, or a string with a TTL, as this leaves.
  local kind = redis.call('TYPE', KEYS[5]).ok
  if kind == 'none' or (kind == 'string' and redis.call('PTTL', KEYS[5]) > 0) then
    redis.call('SET', KEYS[5], ARGV[1], 'PX', RELEASE_MEMORY_MS)
  end
else
  redis.call('SET', KEYS[1], ARGV[1] .. ':released', 'PX', ARGV[2])
end
return 1
