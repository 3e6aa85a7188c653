-- Acquires several mutex keys at once, all or none (lock_all, when the keys share a server or
-- a cluster slot): each is granted only if every one is free and nobody waits in its line.
-- Nothing is written otherwise, and the requests then go one key at a time, which say why.
-- KEYS: for each key, its lock key, fencing counter, queue and queue deadlines (4 per key, as
-- acquire.lua takes them), the keys in the order of ARGV's owners
-- ARGV[1] lease in ms; ARGV[2..] each key's owner token
-- Returns {1, token...} with each key's fencing token in order when granted; {0} when not.
local now_ms, now_us = server_time()
local lasts = {}
for i = 1, #KEYS, 4 do
  -- A holder, foreign data, a waiter's line: left to the one-key requests.
  if redis.pcall('GET', KEYS[i]) or redis.call('EXISTS', KEYS[i + 2], KEYS[i + 3]) > 0 then
    return {0}
  end
  local last = read_fence(KEYS[i + 1])
  if not last then
    return {0}
  end
  table.insert(lasts, last)
end
local reply = {1}
for n, last in ipairs(lasts) do
  local at = (n - 1) * 4 + 1
  table.insert(reply, grant(KEYS[at], KEYS[at + 1], ARGV[n + 1], ARGV[1], last, now_us))
end
return reply
