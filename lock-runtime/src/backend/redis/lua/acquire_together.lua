-- Acquires several mutex keys at once, all or none (lock_all, when the keys share a server or
-- a cluster slot): each is granted only if every one is free and nobody waits in its line.
-- Nothing is written otherwise, and the requests then go one key at a time, which say why.
-- A copy of the call that finds the keys held by its own owners (the first copy was applied,
-- its reply lost) answers as the first did: the owners are drawn for each call.
-- KEYS: for each key, its lock key, queue and queue deadlines (3 per key, as acquire.lua
-- takes them), the keys in the order of ARGV's owners
-- ARGV[1] lease in ms (every key's); ARGV[2..] each key's owner token
-- Returns {1, token...} with each key's fencing token in order when granted; {0} when not.
local clock = lazy_clock()
local locks, tokens = {}, {}
for n = 1, #KEYS / 3 do
  local at = (n - 1) * 3 + 1
  local lock = read_lock(KEYS[at])
  if lock and lock.owner == ARGV[n + 1] and HELD[lock.state] then
    tokens[n] = lock.token
  elseif lock == nil or holds(lock, clock) or (lock and lock.owner == ARGV[n + 1])
      or (lock and untimed_lock(KEYS[at])) then
    -- Foreign data, a holder, or this call's own release: left to the one-key requests.
    return {0}
  elseif (not lock or lock.state == 'q') and redis.call('EXISTS', KEYS[at + 1], KEYS[at + 2]) > 0 then
    -- A waiter's line: left to the one-key requests too.
    return {0}
  end
  locks[n] = lock
end
local reply = {1}
for n = 1, #KEYS / 3 do
  local at = (n - 1) * 3 + 1
  if tokens[n] then
    -- Never shortened, as a retry of acquire.lua's.
    if redis.call('PTTL', KEYS[at]) < tonumber(ARGV[1]) then
      redis.call('PEXPIRE', KEYS[at], ARGV[1])
    end
  else
    tokens[n] = grant_lock(KEYS[at], locks[n], ARGV[n + 1], ARGV[1], false, clock)
  end
  table.insert(reply, tokens[n])
end
return reply
