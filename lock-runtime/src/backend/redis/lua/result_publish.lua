-- A single-flight call's value (`action = Share`), left for the callers of other processes.
-- KEYS[1] lock key, KEYS[2] its result key; ARGV[1] the publisher's fencing token, ARGV[2] the
-- value, ARGV[3] how long it is kept (ms).
-- Kept only while the publisher's grant holds the key's mutex (see mutex.lua), and never
-- over a value of a later grant. The result key holds `<token> <value>`; anything else there
-- is another program's, and left alone.
-- Returns 1 if it was kept, 0 if the grant no longer holds the key, 3 if a value of this
-- token or a later one is kept, 2 if the result key holds foreign data.
local lock = read_lock(KEYS[1])
if not (lock and HELD[lock.state] and lock.token == ARGV[1]) then
  return 0
end
local found = redis.call('TYPE', KEYS[2]).ok
if found ~= 'string' and found ~= 'none' then
  return 2
end
local kept = redis.call('GET', KEYS[2])
if kept then
  -- A token is a u64 (as the client reads it back): at most 20 digits, at most 2^64 - 1.
  local token = string.match(kept, '^(%d+) ')
  if not token or #token > 20 or (#token == 20 and token > '18446744073709551615') then
    return 2
  end
  -- Decimal tokens compared as text: longer is later, then by digits.
  if #token > #ARGV[1] or (#token == #ARGV[1] and token >= ARGV[1]) then
    return 3
  end
end
redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
return 1
