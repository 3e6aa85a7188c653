-- Acquire in arrival order: a free key goes to the head of the key's queue.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue (list of owners, oldest first),
-- KEYS[4] queue deadlines (zset: owner -> ms after which its place is given up)
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] how long this waiter's place lasts, ms
-- Returns {1, token} when granted; {0, remaining ms} while another owner holds the key;
-- {0, -3} when the key is free but an earlier waiter's turn; {2, why} when the key or one
-- kept next to it holds something that is not a lock's. Everything is read before anything
-- is written.
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local reply, holder = read_holder(KEYS[1], ARGV[1], ARGV[2])
if reply then
  return reply
end
local lapsed, foreign = read_helper('ZRANGEBYSCORE', KEYS[4], 'queue deadlines', '-inf', now_ms)
local queued
if not foreign then
  queued, foreign = read_helper('LLEN', KEYS[3], 'queue')
end
foreign = foreign or untimed(KEYS[4], 'queue deadlines') or untimed(KEYS[3], 'queue')
local last = 0
if not foreign and not holder then
  last, foreign = read_fence(KEYS[2])
end
if foreign then
  return {2, foreign}
end
-- Waiters that stopped renewing their place (died, or gave up without a word) leave.
for _, gone in ipairs(lapsed) do
  redis.call('LREM', KEYS[3], 0, gone)
  redis.call('ZREM', KEYS[4], gone)
end
if not holder then
  local head = redis.call('LINDEX', KEYS[3], 0)
  if not head or head == ARGV[1] then
    if head then
      redis.call('LPOP', KEYS[3])
      redis.call('ZREM', KEYS[4], ARGV[1])
    end
    return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], last)
  end
end
if not redis.call('ZSCORE', KEYS[4], ARGV[1]) then
  redis.call('RPUSH', KEYS[3], ARGV[1])
end
redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[3]), ARGV[1])
-- The queue vanishes once the last of its waiters' places has lapsed.
local latest = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
local lasts_ms = math.max(tonumber(latest[2]) - now_ms, 1)
redis.call('PEXPIRE', KEYS[3], lasts_ms)
redis.call('PEXPIRE', KEYS[4], lasts_ms)
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
return {0, -3}
