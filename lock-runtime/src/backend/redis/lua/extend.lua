-- Restart the leases of many locks at once (the renewal loop's batch).
-- KEYS[i] lock key; ARGV[3i-2] its owner token, ARGV[3i-1] the fencing token of its grant,
-- ARGV[3i] its lease in ms.
-- Returns one 1 (extended) or 0 per key: 0 when the key is gone, owned by another owner, or
-- granted anew (to the same owner, by a late request, after it was deleted): the holder must
-- learn that its grant ended. A key holding another type (replaced by someone else's data) is
-- not ours either: 0 for it, the others go on.
local extended = {}
for i, key in ipairs(KEYS) do
  if redis.pcall('GET', key) == ARGV[3 * i - 2] .. ':' .. ARGV[3 * i - 1] then
    redis.call('PEXPIRE', key, ARGV[3 * i])
    extended[i] = 1
  else
    extended[i] = 0
  end
end
return extended
