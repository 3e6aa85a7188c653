DELETE FROM {shares} WHERE name = ? AND owner = ?
