-- No share of the name is live any more: its marker goes. Parameter: the name.
DELETE FROM {locks} WHERE name = $1 AND owner = {marker}
