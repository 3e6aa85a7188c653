-- Shared by the operator's scripts (inspection, forced release), which are appended to this
-- text (after grant.lua): how they name what a lock key holds without revealing owner tokens
-- (whoever has one can release the lock).

-- The tag of an owner token: the first 16 hex digits of its SHA-1, as release messages name
-- the owner a key was handed to.
local function owner_tag(owner)
  return string.sub(redis.sha1hex(owner), 1, 16)
end

-- What the value of a lock key (shaped as a lock's: see foreign_holder) says: 'held', its
-- owner's tag and the fencing token of the grant ('' for a bare owner, written by versions
-- before tokens were kept in the value); or 'kept', the owner's tag and '' for a key that
-- min_hold_ms keeps after its release.
local function describe_holder(holder)
  local owner, token = string.match(holder, '^(.*):(%d+)$')
  if owner then
    return 'held', owner_tag(owner), token
  end
  owner = string.match(holder, '^(.*):released$')
  if owner then
    return 'kept', owner_tag(owner), ''
  end
  return 'held', owner_tag(holder), ''
end
