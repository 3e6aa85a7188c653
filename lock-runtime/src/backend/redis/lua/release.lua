-- Release the lock only if ARGV[1] still owns it (the seed's T1/T2 case: a holder whose lease
-- expired must not delete the next holder's lock).
-- KEYS[1] lock key; ARGV[1] owner token; ARGV[2] ms to keep the key (min_hold_ms), 0 to delete.
-- Returns 1 if released, 0 if not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '0' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
