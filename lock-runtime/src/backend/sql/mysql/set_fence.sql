UPDATE {fences} SET token = ? WHERE name = ?
