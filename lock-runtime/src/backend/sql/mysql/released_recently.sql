SELECT token FROM {fences}
WHERE name = ? AND released_by = ? AND released_until > UTC_TIMESTAMP(6)
