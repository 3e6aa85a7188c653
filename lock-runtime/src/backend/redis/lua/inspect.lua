-- What an operator sees of one lock, read without writing anything; owners are named by tag.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue deadlines
-- ARGV[1] how many queue entries to return at most (the oldest)
-- Returns {'foreign', why} when the key, or one kept next to it, holds something that is not
-- a lock's. Otherwise {state, holder's tag, fencing token, remaining ms of the lease, the
-- fencing counter's token, live places, entries...}: state 'free' (tag and token '',
-- remaining -2), 'held' or 'kept' (see describe_holder); the counter's token '' without one;
-- then for each queue entry, oldest first: its waiter's tag, its lease in ms ('' for an entry
-- of another version's shape), and ms until its place lapses (0 or less: lapsed, and skipped
-- by the next hand-off).
local holder = redis.pcall('GET', KEYS[1])
local foreign = foreign_holder(KEYS[1], holder)
local now_ms = server_time()
local last
if not foreign then
  last, foreign = read_fence(KEYS[2])
end
if not foreign then
  local lapsed, head = read_queue(KEYS[3], KEYS[4], now_ms)
  foreign = not lapsed and head
end
if foreign then
  return {'foreign', foreign}
end
local reply = {'free', '', '', -2, '', 0}
if holder then
  reply[1], reply[2], reply[3] = describe_holder(holder)
  reply[4] = redis.call('PTTL', KEYS[1])
end
if last > 0 then
  reply[5] = string.format('%.0f', last)
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  reply[6] = redis.call('ZCOUNT', KEYS[4], '(' .. string.format('%.0f', now_ms), '+inf')
  for _, entry in ipairs(redis.call('LRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1)) do
    local owner, lease_ms = string.match(entry, '^(%S+) (%d+)')
    local lapses_at = redis.call('ZSCORE', KEYS[4], entry)
    table.insert(reply, owner_tag(owner or entry))
    table.insert(reply, lease_ms or '')
    table.insert(reply, lapses_at and math.floor(tonumber(lapses_at) - now_ms) or 0)
  end
end
return reply
