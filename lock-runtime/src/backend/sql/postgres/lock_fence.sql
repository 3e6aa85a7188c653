-- Takes the name's fence row (created at 0 on first use) and its row lock, which every
-- acquire and release of the name holds until it commits; returns the latest token.
INSERT INTO {fences} (name, token) VALUES ($1, 0)
ON CONFLICT (name) DO UPDATE SET token = {fences}.token
RETURNING token
