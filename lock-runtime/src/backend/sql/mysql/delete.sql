DELETE FROM {locks} WHERE name = ? AND owner = ?
