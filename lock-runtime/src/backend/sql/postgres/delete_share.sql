DELETE FROM {shares} WHERE name = $1 AND owner = $2
