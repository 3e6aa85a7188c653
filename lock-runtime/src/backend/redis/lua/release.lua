-- Release the lock only if ARGV[1] still owns it (a holder whose lease expired must not delete
-- the next holder's lock), hand it to the oldest waiter in the queue whose place lasts, and
-- take back the place ARGV[1] may have in the queue as a waiter.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue deadlines,
-- KEYS[5] who released the lock last (kept for RELEASE_MEMORY_MS)
-- ARGV[1] owner token; ARGV[2] ms to keep the key (min_hold_ms), 0 to delete; ARGV[3] the
-- channel on which waiters hear of releases; ARGV[4] the owner's lease in ms (its queue entry);
-- ARGV[5] `PUBLISH`, or `SPUBLISH` on a Redis Cluster (the channel shares the keys' slot)
-- Publishes `granted <sha1 of the new owner's token> <fencing token>` when the key was handed
-- over (never the token: whoever has it can release the lock), `released <fencing token of the
-- grant released>` when it is free (Redlock's waiters hear one release from each master),
-- `left` when a waiter leaves a free key (it may have been the one whose turn it was).
-- Returns 1 if released, 0 if another owner (or foreign data) holds the key, -1 if nobody
-- does. The key holds `<owner>:<token>`; any grant of the owner is released. A kept key
-- (min_hold_ms) is marked `<owner>:released`, so that a renewal already on its way cannot
-- extend it again, and a resent release still finds it ours; a deleted one leaves its owner
-- in KEYS[5] for a while, so that a release sent again after its reply was lost learns that
-- the first one released it (and not that the key vanished some other way). Keys next to the
-- lock go through pcall: foreign data there must not keep the lock from being released (nor is
-- the key handed over then). PUBLISH too: a user whose ACL grants no channels (Redis 7's
-- default) must still release; its waiters poll.
-- How long KEYS[5] remembers the last release: longer than a resend takes.
local RELEASE_MEMORY_MS = 30000

local left = false
local entry = queue_entry(ARGV[1], ARGV[4])
local removed = redis.pcall('LREM', KEYS[3], 0, entry)
if type(removed) == 'number' and removed > 0 then
  redis.pcall('ZREM', KEYS[4], entry)
  left = true
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
  if left then
    redis.pcall(ARGV[5], ARGV[3], 'left')
  end
  return -1
end
if ARGV[2] == '0' then
  redis.call('DEL', KEYS[1])
  -- Not over another program's data: an empty key, or a string with a TTL, as this leaves.
  local kind = redis.call('TYPE', KEYS[5]).ok
  -- A shared kind's memory of this key (a sorted set with a TTL) gives way too: the key
  -- serves a mutex now.
  local memory_ttl = redis.call('PTTL', KEYS[5])
  if kind == 'zset' and memory_ttl > 0 and memory_ttl <= RELEASE_MEMORY_MS then
    redis.call('DEL', KEYS[5])
    kind = 'none'
  end
  if kind == 'none' or (kind == 'string' and memory_ttl > 0) then
    redis.call('SET', KEYS[5], ARGV[1], 'PX', RELEASE_MEMORY_MS)
  end
  announce_release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], holder, ARGV[3], ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[1] .. ':released', 'PX', ARGV[2])
end
return 1
