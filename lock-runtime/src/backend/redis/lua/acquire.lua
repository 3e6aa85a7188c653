-- Acquire, or recognise a retry by the same owner; a waiter that finds the key held keeps
-- its place in the key's queue, so that a release can hand the key over (see mutex.lua).
-- KEYS[1] lock key, KEYS[2] queue (list of entries `<owner> <lease ms>`, oldest first),
-- KEYS[3] queue deadlines (zset: entry -> server ms after which its place lapses), KEYS[4]
-- the fencing counter, which only Redlock's grants keep (see grant_lock); all in one hash
-- slot
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] how long the owner's place lasts in ms
-- (0: a single attempt, it takes no place), ARGV[4] '1' in fair mode: a free key goes only
-- to the queue's head, ARGV[5] '1' when a WAIT follows (the grant must be a write of this
-- connection, also when the owner already holds the key), ARGV[6] the least token to grant
-- (Redlock's proposal, in place of the server clock), or ''
-- Returns {1, token} when granted; {0, remaining ms of the holder's lease (-3: free, but an
-- earlier waiter's turn), the key's latest fencing token ('0': none left)}; {2, why} when the
-- key or one kept next to it holds something that is not a lock's. Everything is read before
-- anything is written. An uncontended attempt reads and writes the lock key alone.
local owner, lease_ms, fair = ARGV[1], ARGV[2], ARGV[4] == '1'
local lock, foreign = read_lock(KEYS[1])
if foreign then
  return {2, foreign}
end
if lock and lock.owner == owner and HELD[lock.state] then
  -- A retry whose reply was lost, or a waiter that missed the release handing it the key:
  -- the lease is restarted, never shortened (a late copy of an attempt must not cut a lease
  -- its owner counts on), and the token kept.
  local remaining = redis.call('PTTL', KEYS[1])
  if remaining < tonumber(lease_ms) then
    redis.call('PEXPIRE', KEYS[1], lease_ms)
  elseif ARGV[5] == '1' then
    redis.call('PEXPIRE', KEYS[1], remaining)
  end
  return {1, lock.token}
end
local clock = lazy_clock()
local held = holds(lock, clock)
-- Every value a lock leaves has a TTL, a tombstone's too: one without is another program's.
-- Read once: nothing below changes it (a mark keeps it).
local ttl = lock and redis.call('PTTL', KEYS[1])
if ttl == -1 then
  foreign = UNTIMED_LOCK
end
-- A line can exist only where a state says so, or where the key went missing under it (a
-- holder's lease expired while others waited); fair mode looks in any case, and so does an
-- attempt that will take a place (foreign data there must be reported, not written to).
local placed = ARGV[3] ~= '0'
local head
if not foreign and (fair or not lock or lock.state == 'w' or lock.state == 'q' or (held and placed)) then
  local lapsed
  lapsed, head = read_queue(KEYS[2], KEYS[3], clock())
  foreign = not lapsed and head
  if not foreign then
    head = prune_queue(KEYS[2], KEYS[3], lapsed, head)
  end
end
local floor, fenced = ARGV[6] ~= '' and tonumber(ARGV[6]) or nil, nil
if not foreign and floor and not held then
  local counted
  counted, foreign = read_fence(KEYS[4])
  fenced = {key = KEYS[4], last = counted}
end
if foreign then
  return {2, foreign}
end
local mine = queue_entry(owner, lease_ms)
if not held and (not fair or not head or head == mine) then
  local waiting = false
  if head then
    redis.call('LREM', KEYS[2], 0, mine)
    redis.call('ZREM', KEYS[3], mine)
    waiting = redis.call('EXISTS', KEYS[2]) == 1
  end
  return {1, grant_lock(KEYS[1], lock, owner, lease_ms, waiting, clock, floor, fenced)}
end
-- A late copy of an attempt that finds the key kept after its owner's release takes no place:
-- the owner has left, and its release, which found the key kept, took none back.
placed = placed and not (lock and lock.owner == owner)
if placed then
  keep_place(KEYS[2], KEYS[3], mine, clock(), ARGV[3])
end
-- A place marks the lock: its release (or, for a kept key, its next grant) reads the line.
local remaining = -3
if lock then
  local flag = lock.state
  if placed then
    flag = HELD[lock.state] and 'w' or 'q'
  end
  if flag ~= lock.state then
    redis.call('SET', KEYS[1], lock_value(flag, lock.token, lock.run, lock.free_at, lock.owner), 'KEEPTTL')
  end
  if HELD[lock.state] then
    remaining = ttl
  elseif held then
    remaining = math.max(lock.free_at - clock(), 1)
  end
end
return {0, remaining, lock and lock.token or '0'}
