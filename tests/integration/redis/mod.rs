//! Redis-only behaviour, on one private `redis-server`: the scripts and key layout, pub/sub
//! waiting and hand-off, leases, the shared kinds' bookkeeping, ACLs and TLS, and the
//! operator's view of what only Redis can hold (foreign data).

mod hand_off;
mod kinds;
mod lease;
mod one_key;
mod operator;
mod runtime;
mod security;
mod shared_foreign;
mod shared_random;
mod shared_ttl;
mod waiting;
