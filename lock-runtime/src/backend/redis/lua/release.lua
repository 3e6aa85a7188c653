-- Release the lock only if ARGV[1] still owns it (a holder whose lease expired must not delete
-- the next holder's lock), hand it to the oldest waiter in the queue whose place lasts, and
-- take back the place ARGV[1] may have in the queue as a waiter.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue deadlines,
-- KEYS[5] the owner's release memory (`<lock key>:released:<owner>`)
-- ARGV[1] owner token; ARGV[2] ms to keep the key (min_hold_ms), 0 to delete; ARGV[3] the
-- channel on which waiters hear of releases; ARGV[4] the owner's lease in ms (its queue entry);
-- ARGV[5] `PUBLISH`, or `SPUBLISH` on a Redis Cluster (the channel shares the keys' slot);
-- ARGV[6] ms to remember the release (longer than a resend can take to arrive)
-- Publishes `granted <sha1 of the new owner's token> <fencing token>` when the key was handed
-- over (never the token: whoever has it can release the lock), `released <fencing token of the
-- grant released>` when it is free (Redlock's waiters hear one release from each master),
-- `left` when a waiter leaves a free key (it may have been the one whose turn it was).
-- Returns 1 if released, 0 if another owner (or foreign data) holds the key, -1 if nobody
-- does. The key holds `<owner>:<token>`; any grant of the owner is released. A kept key
-- (min_hold_ms) is marked `<owner>:released`, so that a renewal already on its way cannot
-- extend it again (and a resent release finds it ours while it lasts). Either way KEYS[5]
-- remembers the release for ARGV[6] ms, for this owner alone: a release sent again after its reply was lost learns that the first one released the
-- key, whatever the key saw since (a hold that ended, other owners' grants and releases). Keys
-- next to the lock go through pcall: foreign data there must not keep the lock from being
-- released (nor is the key handed over then). PUBLISH too: a user whose ACL grants no channels
-- (Redis 7's default) must still release; its waiters poll.
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] .. ':released' then
  return 1
end
local ours = type(holder) == 'string' and string.sub(holder, 1, #ARGV[1] + 1) == ARGV[1] .. ':'
if not ours then
  -- A waiter leaving takes back its place (a holder's left the queue when it was granted).
  local entry = queue_entry(ARGV[1], ARGV[4])
  local removed = redis.pcall('LREM', KEYS[3], 0, entry)
  local left = type(removed) == 'number' and removed > 0
  if left then
    redis.pcall('ZREM', KEYS[4], entry)
  end
  if redis.call('EXISTS', KEYS[5]) == 1 then
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
  announce_release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], holder, ARGV[3], ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[1] .. ':released', 'PX', ARGV[2])
end
redis.call('SET', KEYS[5], '1', 'PX', ARGV[6])
return 1
