SELECT token FROM {fences}
WHERE name = $1 AND released_by = $2 AND released_until > clock_timestamp()
