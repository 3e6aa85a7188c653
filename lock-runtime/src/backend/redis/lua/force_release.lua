-- An operator's forced release: deletes the lock key if it holds the grant named (its owner's
-- tag, its fencing token), whatever its lease (no owner token needed), keeps the fencing counter
-- (the next grant's token is greater), hands the key to the oldest waiter whose place lasts as a
-- release does, and announces what happened, so that waiters wake. Unlike a release it leaves
-- no release memory: the holder did not release, and its next renewal or release must find its
-- lease lost. Foreign data in the lock key is not touched; nor is another grant (one that took
-- the key since the operator looked, also the same owner's, whose token is greater; or the one
-- a first run of this script handed it to).
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue deadlines
-- ARGV[1] the channel of the key's releases, ARGV[2] `PUBLISH`, or `SPUBLISH` on a Redis
-- Cluster, ARGV[3] the tag of the grant's owner (see owner_tag), ARGV[4] its fencing token, or
-- '' when it names none (a key kept after its release: the owner names it)
-- Returns {0} when nobody holds the key; {2, why} when it holds something that is not a
-- lock's; {3, state, holder's tag, fencing token, remaining ms of its lease} when it holds
-- another grant (nothing changed); else {1, state, tag, token, remaining ms, the message
-- published} (see describe_holder and announce_release).
local holder = redis.pcall('GET', KEYS[1])
local foreign = foreign_holder(KEYS[1], holder)
if foreign then
  return {2, foreign}
end
if not holder then
  return {0}
end
local state, tag, token = describe_holder(holder)
local remaining = redis.call('PTTL', KEYS[1])
local later = ARGV[4] ~= '' and token ~= '' and tonumber(token) > tonumber(ARGV[4])
if tag ~= ARGV[3] or later then
  return {3, state, tag, token, remaining}
end
redis.call('DEL', KEYS[1])
local message = announce_release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], holder, ARGV[1], ARGV[2])
return {1, state, tag, token, remaining, message}
