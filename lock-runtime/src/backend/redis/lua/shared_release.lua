-- Release a shared kind's grant (see shared.lua) only if ARGV[1] holds it, hand the key to the
-- waiters at the head of the queue as far as they may join (unless ARGV[8] says not to), and
-- take back the place ARGV[1] may have in the queue as a waiter.
-- KEYS[1] lock key (a hash), KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue deadlines,
-- KEYS[5] the owner's release memory (`<lock key>:released:<owner>`), KEYS[6] the leases,
-- KEYS[7] the shards marked exhausted
-- ARGV[1] owner token; ARGV[2] ms to keep the grant (min_hold_ms), 0 to delete; ARGV[3] the
-- channel on which waiters hear of releases; ARGV[4] the owner's lease in ms; ARGV[5]
-- `PUBLISH`, or `SPUBLISH` on a Redis Cluster; ARGV[6] the owner's kind and ARGV[7] its count
-- (with ARGV[4], its queue entry); ARGV[8] '1' to hand the key over, '0' on a master of
-- Redlock, whose masters keep no common line (each could hand the key to another waiter): a
-- waiting writer keeps a place there only to hold back later readers, and attempts again when
-- it hears of the release. ARGV[9] ms to remember the release (longer than a resend can take
-- to arrive).
-- Publishes `granted <sha1 of the new owner's token> <fencing token>` for each waiter handed
-- the key, else `released <fencing token of the grant released>`; `left` when a waiter
-- leaves. Returns 1 if released, 0 if the key holds no grant of the owner (or holds
-- something else), -1 if it holds nothing. A kept grant is marked `released`, so that a
-- renewal already on its way cannot extend it again and a resent release still finds it;
-- either way KEYS[5] remembers the release for ARGV[9] ms, for this owner alone, so that a
-- release sent again after its reply was lost learns that the first one released it, however
-- busy the key was since. PUBLISH goes through pcall: a user whose ACL grants no channels must
-- still release; its waiters poll.

local now_ms, now_us = server_time()
local entry = shared_entry(ARGV[1], ARGV[4], ARGV[6], ARGV[7])
local removed = redis.pcall('LREM', KEYS[3], 0, entry)
local left = type(removed) == 'number' and removed > 0
if left then
  redis.pcall('ZREM', KEYS[4], entry)
end
local foreign = open_shared(KEYS[1], KEYS[6], now_ms)
local mine = not foreign and read_grant(KEYS[1], ARGV[1])
if not mine then
  if redis.call('EXISTS', KEYS[5]) == 1 then
    return 1
  end
  if left then
    redis.pcall(ARGV[5], ARGV[3], 'left')
  end
  if not foreign and redis.call('EXISTS', KEYS[6]) == 0 then
    return -1
  end
  return 0
end
if mine.token == 'released' then
  return 1
end
local member = ARGV[1] .. ':' .. mine.token
if ARGV[2] ~= '0' then
  local kept_until = now_ms + tonumber(ARGV[2])
  redis.call('ZREM', KEYS[6], member)
  redis.call('ZADD', KEYS[6], string.format('%.0f', kept_until), ARGV[1] .. ':released')
  redis.call('HSET', KEYS[1], 'o:' .. ARGV[1], mine.kind .. ' released ' .. mine.slot .. ' ' ..
    mine.count)
  fit_lifetime(KEYS[1], KEYS[6], now_ms)
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[9])
  return 1
end
remove_grant(KEYS[1], KEYS[6], mine, member, now_ms)
redis.call('SET', KEYS[5], '1', 'PX', ARGV[9])
local announced = {}
if ARGV[8] == '1' then
  announced = hand_off_shared(KEYS[1], KEYS[6], KEYS[2], KEYS[3], KEYS[4], KEYS[7], now_ms, now_us)
end
if #announced == 0 then
  announced = {'released ' .. mine.token}
end
for _, message in ipairs(announced) do
  redis.pcall(ARGV[5], ARGV[3], message)
end
return 1
