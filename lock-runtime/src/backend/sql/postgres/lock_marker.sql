-- First step of a shared kind's acquire, release or forced release, after the fence row lock:
-- locks the name's lock row, if any (a marker, or a mutex's), so that no renewal of a share
-- (which locks the marker first) runs meanwhile and every later statement sees the latest
-- rows. Parameter: the name.
SELECT 1 FROM {locks} WHERE name = $1 FOR UPDATE
