-- Acquire, or recognise a retry by the same owner; a waiter that finds the key held keeps
-- its place in the key's queue, so that a release can hand the key over.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue (list of entries
-- `<owner> <lease ms>`, oldest first), KEYS[4] queue deadlines (zset: entry -> server ms after
-- which its place lapses); all in one hash slot
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] how long the owner's place lasts in ms
-- (0: a single attempt, it takes no place), ARGV[4] '1' in fair mode: a free key goes only
-- to the queue's head, ARGV[5] '1' when a WAIT follows (the grant must be a write of this
-- connection, also when the owner already holds the key), ARGV[6] the least token to grant
-- (Redlock's proposal, in place of the server clock), or ''
-- Returns {1, token} when granted; {0, remaining ms of the holder's lease (-3: free, but an
-- earlier waiter's turn), the key's latest fencing token (the counter's, or the holder's if
-- greater: the counter may have expired under a long hold)}; {2, why} when the key or one kept
-- next to it holds something that is not a lock's. Everything is read before anything is
-- written.
local reply, holder = read_holder(KEYS[1], ARGV[1], ARGV[2], ARGV[5] == '1')
if reply then
  return reply
end
local now_ms, now_us = server_time()
local lapsed, head = read_queue(KEYS[3], KEYS[4], now_ms)
local foreign = not lapsed and head
local last
if not foreign then
  last, foreign = read_fence(KEYS[2])
end
if foreign then
  return {2, foreign}
end
head = prune_queue(KEYS[3], KEYS[4], lapsed, head)
local mine = queue_entry(ARGV[1], ARGV[2])
if not holder and (ARGV[4] ~= '1' or not head or head == mine) then
  if head then
    redis.call('LREM', KEYS[3], 0, mine)
    redis.call('ZREM', KEYS[4], mine)
  end
  return {1, grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], last, now_us, tonumber(ARGV[6]))}
end
-- A late copy of an attempt that finds the key kept after its owner's release takes no place:
-- the owner has left, and its release, which found the key kept, took none back.
if ARGV[3] ~= '0' and holder ~= ARGV[1] .. ':released' then
  keep_place(KEYS[3], KEYS[4], mine, now_ms, ARGV[3])
end
local remaining = -3
if holder then
  remaining = redis.call('PTTL', KEYS[1])
  local holder_token = tonumber(string.match(holder, ':(%d+)$') or '0')
  last = math.max(last, holder_token)
end
return {0, remaining, string.format('%.0f', last)}
