-- What an operator sees of one lock, read without writing anything; owners are named by tag.
-- KEYS[1] lock key, KEYS[2] a shared kind's fencing counter, KEYS[3] queue, KEYS[4] queue
-- deadlines, KEYS[5] a shared kind's leases
-- ARGV[1] how many queue entries and shared grants to return at most (the first)
-- Returns {'foreign', why} when the key, or one kept next to it, holds something that is not
-- a lock's. Otherwise {state, holder's tag, fencing token, remaining ms of the lease, the
-- latest fencing token (a shared kind's counter, a mutex's grant or tombstone), live places, grants, grants shown, grant fields..., entries...}:
-- state 'free' (tag and token '', remaining -2), 'held' or 'kept' (see describe_holder), or
-- 'shared' (tag and token '', remaining the longest lease's: the grants say who holds it); the
-- latest token '' without one; grants, how many grants of a shared kind hold the key (0 for a mutex), and
-- six fields for each grant shown (see describe_shared); then for each queue entry, oldest
-- first: its waiter's tag, its lease in ms ('' for an entry of another version's shape), and
-- ms until its place lapses (0 or less: lapsed, and skipped by the next hand-off).
local limit = tonumber(ARGV[1])
local now_ms = server_time()
local foreign, lock, holders, grants, longest
if redis.call('TYPE', KEYS[1]).ok == 'hash' then
  holders, grants, longest = describe_shared(KEYS[1], KEYS[5], now_ms, limit)
  if not holders then
    foreign = grants
  end
else
  lock, foreign = read_lock(KEYS[1])
  if lock and holds(lock, function() return now_ms end) then
    foreign = untimed_lock(KEYS[1])
  end
end
local last = 0
if not foreign and not lock then
  last, foreign = read_fence(KEYS[2])
end
if not foreign then
  local lapsed, head = read_queue(KEYS[3], KEYS[4], now_ms)
  foreign = not lapsed and head
end
if foreign then
  return {'foreign', foreign}
end
local reply = {'free', '', '', -2, '', 0, 0, 0}
if grants then
  last = latest_shared_token(KEYS[1], last)
  -- A shared kind's keys whose grants all ended hold nothing (the next attempt drops them).
  if holders > 0 then
    reply[1], reply[4], reply[7], reply[8] = 'shared', longest, holders, #grants / 6
    for _, field in ipairs(grants) do
      table.insert(reply, field)
    end
  end
elseif lock then
  reply[1], reply[2], reply[3], reply[4] = describe_holder(KEYS[1], lock, now_ms)
  last = tonumber(lock.token)
end
if last > 0 then
  reply[5] = string.format('%.0f', last)
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  reply[6] = redis.call('ZCOUNT', KEYS[4], '(' .. string.format('%.0f', now_ms), '+inf')
  for _, entry in ipairs(redis.call('LRANGE', KEYS[3], 0, limit - 1)) do
    local owner, lease_ms = string.match(entry, '^(%S+) (%d+)')
    local lapses_at = redis.call('ZSCORE', KEYS[4], entry)
    table.insert(reply, owner_tag(owner or entry))
    table.insert(reply, lease_ms or '')
    table.insert(reply, lapses_at and math.floor(tonumber(lapses_at) - now_ms) or 0)
  end
end
return reply
