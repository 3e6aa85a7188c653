-- Shared by the release and forced-release scripts, which are appended to this text (after
-- grant.lua): what follows the deletion of a lock key.

-- Grants the free key to the oldest waiter whose place lasts, for its lease or until the place
-- would have lapsed, whichever is sooner (the waiter renews it from there; one that died holds
-- the key no longer than either); returns the message that names it, or nil when nobody waits
-- (or the keys next to the lock are not a lock's).
local function hand_off(lock_key, fence_key, queue_key, deadlines_key)
  -- Nobody waits (every uncontended release): not even the clock is read.
  if redis.call('EXISTS', queue_key) == 0 then
    return nil
  end
  local now_ms, now_us = server_time()
  local head, last = line_to_hand_off(fence_key, queue_key, deadlines_key, now_ms)
  while head do
    redis.call('LPOP', queue_key)
    local lapses_at = redis.call('ZSCORE', deadlines_key, head)
    redis.call('ZREM', deadlines_key, head)
    local owner, lease_ms = string.match(head, '^(%S+) (%d+)$')
    -- An entry without a live place (or of another shape: a shared kind's waiter, left from
    -- before the key served a mutex) is skipped.
    if owner and lapses_at and tonumber(lapses_at) > now_ms then
      lease_ms = math.min(tonumber(lease_ms), tonumber(lapses_at) - now_ms)
      local token = grant(lock_key, fence_key, owner, string.format('%.0f', lease_ms), last, now_us)
      return 'granted ' .. redis.sha1hex(owner) .. ' ' .. token
    end
    head = redis.call('LINDEX', queue_key, 0)
  end
  return nil
end

-- After the lock key was deleted (`holder` was its value), hands the key to the oldest waiter
-- whose place lasts, and announces on `channel` with `publish` (`PUBLISH`, or `SPUBLISH` on a
-- Redis Cluster) what happened: `granted <sha1 of the new owner's token> <fencing token>`
-- (never the token: whoever has it can release the lock), else `released <fencing token of the
-- grant released>`: the value's, or for a key kept after its release (`<owner>:released`) the
-- fencing counter's, which is that grant's (one token on every Redlock master, so that its
-- waiters hear one release), `released` alone when neither names it. Through pcall: a user
-- whose ACL grants no channels (Redis 7's default) must still release; its waiters poll.
-- Returns the message.
local function announce_release(lock_key, fence_key, queue_key, deadlines_key, holder, channel,
                                publish)
  local message = hand_off(lock_key, fence_key, queue_key, deadlines_key)
  if not message then
    local token = string.match(holder, ':(%d+)$')
    if not token then
      local last = read_fence(fence_key)
      token = last and last > 0 and string.format('%.0f', last) or nil
    end
    message = token and ('released ' .. token) or 'released'
  end
  redis.pcall(publish, channel, message)
  return message
end
