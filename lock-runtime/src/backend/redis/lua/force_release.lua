-- An operator's forced release: frees the lock key if it holds the grant named (its owner's
-- tag, its fencing token), whatever its lease (no owner token needed), keeps its token in the
-- tombstone (the next grant's token is greater), hands the key to the oldest waiter whose
-- place lasts as a release does, and announces what happened, so that waiters wake. Unlike a
-- release it breaks the run (see mutex.lua): the holder did not release, and its next renewal
-- or release must find its lease lost. Foreign data in the lock key is not touched; nor is another grant (one that took
-- the key since the operator looked, also the same owner's, whose token is greater; or the one
-- a first run of this script handed it to).
-- A shared kind's key (see shared.lua) has one grant ended the same way: the one the tag and
-- token name, among the live grants; the waiters at the head join the others as far as they
-- may, as after a release.
-- KEYS[1] lock key, KEYS[2] a shared kind's fencing counter, KEYS[3] queue, KEYS[4] queue deadlines,
-- KEYS[5] a shared kind's leases, KEYS[6] a segmented lock's shards marked exhausted
-- ARGV[1] the channel of the key's releases, ARGV[2] `PUBLISH`, or `SPUBLISH` on a Redis
-- Cluster, ARGV[3] the tag of the grant's owner (see owner_tag), ARGV[4] its fencing token, or
-- '' when it names none (a key kept after its release: the owner names it), ARGV[5] '1' to
-- hand a shared key to its waiters, '0' on a master of Redlock (as shared_release.lua),
-- ARGV[6] how many shared grants to describe at most, ARGV[7] ms to keep a mutex's tombstone
-- Returns {0} when nobody holds the key; {2, why} when it holds something that is not a
-- lock's; {3, what holds it} when it holds another grant (nothing changed); else {1, what
-- held it, the first message published}. What holds a mutex: state, holder's tag, fencing
-- token, remaining ms of its lease (see describe_holder and hand_on); a shared key:
-- 'shared', how many grants, how many shown, the longest lease's ms, and the grants (see
-- describe_shared).

-- Ends the shared grant named, if the key holds it.
local function force_release_shared()
  local now_ms, now_us = server_time()
  local foreign = open_shared(KEYS[1], KEYS[5], now_ms)
  if foreign then
    return {2, foreign}
  end
  -- open_shared dropped what was left of a pair whose other key had expired: nothing held it.
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return {0}
  end
  local holders, grants, longest = describe_shared(KEYS[1], KEYS[5], now_ms, tonumber(ARGV[6]))
  if not holders then
    return {2, grants}
  end
  if holders == 0 then
    return {0}
  end
  local found = {'shared', holders, #grants / 6, longest}
  for _, field in ipairs(grants) do
    table.insert(found, field)
  end
  local named, member
  for _, live in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. string.format('%.0f', now_ms), '+inf')) do
    local owner = member_owner(live)
    if owner and owner_tag(owner) == ARGV[3] then
      named, member = read_grant(KEYS[1], owner), live
      break
    end
  end
  local later = named and named.token ~= 'released' and ARGV[4] ~= '' and
    tonumber(named.token) > tonumber(ARGV[4])
  if not named or later then
    table.insert(found, 1, 3)
    return found
  end
  remove_grant(KEYS[1], KEYS[5], named, member, now_ms)
  local announced = {}
  if ARGV[5] == '1' then
    announced = hand_off_shared(KEYS[1], KEYS[5], KEYS[2], KEYS[3], KEYS[4], KEYS[6], now_ms, now_us)
  end
  if #announced == 0 then
    local token = named.token ~= 'released' and named.token or
      string.format('%.0f', latest_shared_token(KEYS[1], read_fence(KEYS[2]) or 0))
    announced = {'released ' .. token}
  end
  for _, message in ipairs(announced) do
    redis.pcall(ARGV[2], ARGV[1], message)
  end
  table.insert(found, 1, 1)
  table.insert(found, announced[1])
  return found
end

if redis.call('TYPE', KEYS[1]).ok == 'hash' then
  return force_release_shared()
end
local lock, foreign = read_lock(KEYS[1])
if foreign then
  return {2, foreign}
end
local clock = lazy_clock()
if not holds(lock, clock) then
  return {0}
end
foreign = untimed_lock(KEYS[1])
if foreign then
  return {2, foreign}
end
local state, tag, token, remaining = describe_holder(KEYS[1], lock, clock())
local later = ARGV[4] ~= '' and token ~= '' and tonumber(token) > tonumber(ARGV[4])
if tag ~= ARGV[3] or later then
  return {3, state, tag, token, remaining}
end
-- A forced grant was not released: its owner's release must not find it released (a grant
-- outside the run), while a kept key's owner did release it.
local run = lock.run
local releaser = lock.owner
if HELD[lock.state] then
  run, releaser = string.format('%.0f', tonumber(lock.token) + 1), ''
end
local listened = {state = (lock.state == 'h' or lock.state == 'r') and 'w' or lock.state, token = lock.token}
local message = hand_on(KEYS[1], KEYS[3], KEYS[4], listened, releaser, run, ARGV[1], ARGV[2],
  tonumber(ARGV[7]), clock)
return {1, state, tag, token, remaining, message}
