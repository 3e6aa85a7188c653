-- Delete the lock only if ARGV[1] still owns it (the seed's T1/T2 case: a holder whose lease
-- expired must not delete the next holder's lock).
-- KEYS[1] lock key; ARGV[1] owner token. Returns 1 if deleted, 0 if not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
