-- Takes the name's fence row (created at 0 on first use) and its row lock, which every
-- acquire and release of the name holds until it commits (ON DUPLICATE KEY UPDATE locks the
-- row exclusively at once: INSERT IGNORE would take a shared lock, and two of them deadlock
-- on the upgrade); then returns the latest token.
INSERT INTO {fences} (name, token) VALUES (?, 0) ON DUPLICATE KEY UPDATE token = token;
SELECT token FROM {fences} WHERE name = ? FOR UPDATE
