SELECT token FROM {fences} WHERE name = ?
