DELETE FROM {locks} WHERE name = $1 AND owner = $2
