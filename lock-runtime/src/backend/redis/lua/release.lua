-- Release the lock only if ARGV[1] still owns it (a holder whose lease expired must not delete
-- the next holder's lock), hand it to the oldest waiter in the queue whose place lasts, or
-- take back the place ARGV[1] may have in the queue as a waiter (see mutex.lua).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue deadlines
-- ARGV[1] owner token; ARGV[2] ms to keep the key (min_hold_ms), 0 to free it; ARGV[3] the
-- channel on which waiters hear of releases; ARGV[4] the owner's lease in ms (its queue entry);
-- ARGV[5] `PUBLISH`, or `SPUBLISH` on a Redis Cluster (the channel shares the keys' slot);
-- ARGV[6] ms to remember the release (longer than a resend can take to arrive); ARGV[7] the
-- fencing token of the owner's grant, or '' for a waiter that holds none
-- Returns 1 if released (by this call, or by an earlier send of it: the key holds the owner's
-- tombstone, or a later grant of the run the owner's grant was in), 0 otherwise. A kept key
-- (min_hold_ms) is marked released, so that a renewal already on its way cannot extend it
-- again. An uncontended release reads and writes the lock key alone.
local owner = ARGV[1]
local lock = read_lock(KEYS[1])
if lock and lock.owner == owner then
  if HELD[lock.state] then
    local clock = lazy_clock()
    local memory_ms = tonumber(ARGV[6])
    if ARGV[2] == '0' then
      hand_on(KEYS[1], KEYS[2], KEYS[3], lock, owner, lock.run, ARGV[3], ARGV[5], memory_ms, clock)
    else
      -- Kept: nobody is handed the key, nor told, before it is free.
      local keep_ms = tonumber(ARGV[2])
      local state = lock.state == 'w' and 'q' or 'r'
      redis.call('SET', KEYS[1], lock_value(state, lock.token, lock.run, clock() + keep_ms, owner),
        'PX', math.max(keep_ms, memory_ms))
    end
  end
  return 1
end
local token = ARGV[7] ~= '' and tonumber(ARGV[7])
if lock and token and tonumber(lock.run) <= token and token < tonumber(lock.token) then
  return 1
end
-- A waiter leaving takes back its place, where a line may be.
if lock == false or (lock and (lock.state == 'w' or lock.state == 'q')) then
  local entry = queue_entry(owner, ARGV[4])
  local removed = redis.pcall('LREM', KEYS[2], 0, entry)
  if type(removed) == 'number' and removed > 0 then
    redis.pcall('ZREM', KEYS[3], entry)
    -- It may have been the one whose turn it was.
    if not holds(lock, lazy_clock()) then
      redis.pcall(ARGV[5], ARGV[3], 'left')
    end
  end
end
return 0
