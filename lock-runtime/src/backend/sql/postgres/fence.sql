SELECT token FROM {fences} WHERE name = $1
