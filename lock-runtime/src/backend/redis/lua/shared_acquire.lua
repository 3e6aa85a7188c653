-- Acquire a shared kind (see shared.lua), or recognise a retry by the same owner; a waiter
-- that may not join the holders keeps its place in the key's queue, so that a release can
-- hand it over.
-- KEYS[1] lock key (a hash), KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue deadlines,
-- KEYS[5] the leases, KEYS[6] the shards marked exhausted (a set)
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] how long the owner's place lasts in ms
-- (0: it takes no place), ARGV[4] '1' in fair mode, ARGV[5] '1' when a WAIT follows (the
-- grant must be a write of this connection), ARGV[6] the least token to grant, or '',
-- ARGV[7] the kind (r, w, s, g), ARGV[8] the count asked for (0 for r and w), ARGV[9] where
-- the search for a free slot starts
-- Returns {1, token, slot} when granted; {0, ms until the first lease ends (-3: no holder,
-- but earlier waiters go first), the key's latest fencing token}; {2, why} when the key holds
-- another kind's grants or something that is not a lock's; {3} when every shard a segmented
-- request may take is marked exhausted.
local now_ms, now_us = server_time()
local foreign = open_shared(KEYS[1], KEYS[5], now_ms, true)
if foreign then
  return {2, foreign}
end
local owner, lease_ms, kind, count = ARGV[1], tonumber(ARGV[2]), ARGV[7], tonumber(ARGV[8])
local mine = read_grant(KEYS[1], owner)
local member = mine and owner .. ':' .. mine.token
local expires = member and tonumber(redis.call('ZSCORE', KEYS[5], member))
if mine and not expires then
  -- A grant without its lease is no grant: what is left of it goes.
  remove_grant(KEYS[1], KEYS[5], mine, member, now_ms)
  mine = nil
end
if mine and mine.token ~= 'released' then
  -- Never shortened: a late copy of an attempt must not cut a lease its owner counts on.
  if expires < now_ms + lease_ms or ARGV[5] == '1' then
    expires = math.max(expires, now_ms + lease_ms)
    redis.call('ZADD', KEYS[5], string.format('%.0f', expires), member)
    fit_lifetime(KEYS[1], KEYS[5], now_ms)
  end
  return {1, mine.token, mine.slot}
end
local lapsed, head = read_queue(KEYS[3], KEYS[4], now_ms)
local last
if lapsed then
  last, foreign = read_fence(KEYS[2])
else
  foreign = head
end
if foreign then
  return {2, foreign}
end
last = latest_shared_token(KEYS[1], last)
head = prune_queue(KEYS[3], KEYS[4], lapsed, head)
local exhausted, unreadable = every_shard_exhausted(KEYS[6], kind, count)
if unreadable then
  return {2, unreadable}
end
if exhausted and not mine then
  return {3}
end
local entry = shared_entry(owner, ARGV[2], kind, ARGV[8])
-- Whether a place ahead holds the request back: in fair mode any (the head is not ours);
-- else, for a reader only, a writer's (the whole line is read only then).
local held_back = false
if head and ARGV[4] == '1' then
  held_back = head ~= entry
elseif head and kind == 'r' then
  for _, waiting in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    if waiting == entry then
      break
    end
    if string.match(waiting, '^%S+ %d+ w %d+$') then
      held_back = true
      break
    end
  end
end
local slot, why = admit(KEYS[1], KEYS[5], kind, count, held_back, tonumber(ARGV[9]), KEYS[6])
if why then
  return {2, why}
end
-- The owner's grant kept after its release (min_hold_ms) is all a late copy of its attempt
-- may find: it takes no second grant, and no place.
if mine then
  slot = false
end
if slot then
  if head then
    redis.call('LREM', KEYS[3], 0, entry)
    redis.call('ZREM', KEYS[4], entry)
  end
  local token = next_token(KEYS[2], last, now_us, tonumber(ARGV[6]))
  local grant = {owner = owner, kind = kind, token = token, slot = slot, count = ARGV[8]}
  add_grant(KEYS[1], KEYS[5], grant, now_ms + lease_ms, now_ms)
  return {1, token, slot}
end
if ARGV[3] ~= '0' and not mine then
  keep_place(KEYS[3], KEYS[4], entry, now_ms, ARGV[3])
end
local remaining = -3
local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
if first[2] then
  remaining = tonumber(first[2]) - now_ms
end
return {0, remaining, string.format('%.0f', last)}
