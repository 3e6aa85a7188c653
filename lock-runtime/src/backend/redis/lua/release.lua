-- Release the lock only if ARGV[1] still owns it (the seed's T1/T2 case: a holder whose lease
-- expired must not delete the next holder's lock), and take ARGV[1] out of the fair queue.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue deadlines
-- ARGV[1] owner token; ARGV[2] ms to keep the key (min_hold_ms), 0 to delete;
-- ARGV[3] the channel on which waiters hear of releases.
-- Returns 1 if released, 0 if not ours.
if redis.call('LREM', KEYS[2], 0, ARGV[1]) > 0 then
  redis.call('ZREM', KEYS[3], ARGV[1])
  -- A waiter that leaves may have been the one whose turn it was.
  if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('PUBLISH', ARGV[3], 'left')
  end
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '0' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], 'released')
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
