UPDATE {fences} SET token = $1 WHERE name = $2
