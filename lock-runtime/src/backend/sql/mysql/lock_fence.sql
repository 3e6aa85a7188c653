-- Takes the name's fence row lock (creating the row on first use), which every acquire and
-- release of the name holds until it commits. Parameters: name, the increment twice (1 for
-- an acquire, which draws a token no grant has had, so a grant under it is greater than
-- every earlier one; 0 for a release, which leaves the counter as it is). ON DUPLICATE KEY
-- UPDATE locks the row exclusively at once (INSERT IGNORE would take a shared lock, and two
-- of them deadlock on the upgrade).
INSERT INTO {fences} (name, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = token + ?
