-- Acquires several mutex keys at once, all or none (lock_all, when the keys share a server or
-- a cluster slot): each is granted only if every one is free and nobody waits in its line.
-- Nothing is written otherwise, and the requests then go one key at a time, which say why.
-- A copy of the call that finds the keys held by its own owners (the first copy was applied,
-- its reply lost) answers as the first did: the owners are drawn for each call.
-- KEYS: for each key, its lock key, fencing counter, queue and queue deadlines (4 per key, as
-- acquire.lua takes them), the keys in the order of ARGV's owners
-- ARGV[1] lease in ms (every key's); ARGV[2..] each key's owner token
-- Returns {1, token...} with each key's fencing token in order when granted; {0} when not.
local now_ms, now_us = server_time()
local lasts, tokens = {}, {}
for n = 1, #KEYS / 4 do
  local at = (n - 1) * 4 + 1
  local holder = redis.pcall('GET', KEYS[at])
  local owner, token
  if type(holder) == 'string' then
    owner, token = string.match(holder, '^(.*):(%d+)$')
  end
  if owner == ARGV[n + 1] then
    tokens[n] = token
  elseif holder or redis.call('EXISTS', KEYS[at + 2], KEYS[at + 3]) > 0 then
    -- A holder, foreign data, a waiter's line: left to the one-key requests.
    return {0}
  else
    lasts[n] = read_fence(KEYS[at + 1])
    if not lasts[n] then
      return {0}
    end
  end
end
local reply = {1}
for n = 1, #KEYS / 4 do
  local at = (n - 1) * 4 + 1
  if tokens[n] then
    -- Never shortened, as a retry of acquire.lua's.
    if redis.call('PTTL', KEYS[at]) < tonumber(ARGV[1]) then
      redis.call('PEXPIRE', KEYS[at], ARGV[1])
    end
  else
    tokens[n] = grant(KEYS[at], KEYS[at + 1], ARGV[n + 1], ARGV[1], lasts[n], now_us)
  end
  table.insert(reply, tokens[n])
end
return reply
