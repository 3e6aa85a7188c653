-- First step of a shared kind's acquire, release or forced release, after the fence row lock:
-- locks the name's lock row, so that no renewal of a share (which locks the marker first) runs
-- meanwhile, and the read view that the next read takes sees the latest rows. A missing row is
-- inserted as an expired marker (the step that settles the marker deletes or renews it before
-- the commit): a locking read of a missing row would take a gap lock, and two of them, for
-- neighbouring names, would deadlock on their inserts. Parameter: the name.
INSERT INTO {locks} (name, owner, token, expires_at)
VALUES (?, {marker}, 0, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE owner = owner
