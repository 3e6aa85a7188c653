//! The guide's several keys at once: `keys = [...]` and `lock_all`.

use fencelock::{LockClient, LockError, current_tokens, redis_lock, with_client};

/// Both accounts held for the transfer, all or none; each key has its own fencing token.
#[redis_lock(keys = ["acct:{from}", "acct:{to}"], wait_ms = 5_000)]
async fn transfer(from: u64, to: u64, amount: u64) -> Result<(), LockError> {
    for (key, token) in current_tokens() {
        println!("{key} under token {token}: move {amount}"); // hand each store its token
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), LockError> {
    let locks = LockClient::memory();
    // (7, 3) and (3, 7) at once: both take acct:3 first, so neither waits for the other.
    let there = with_client(locks.clone(), transfer(7, 3, 10));
    let back = with_client(locks.clone(), transfer(3, 7, 5));
    let (there, back) = tokio::join!(there, back);
    there?;
    back?;
    // By hand: one guard for every key.
    let both = locks.lock_all(["acct:7", "acct:3"]).wait_ms(5_000);
    let both = both.acquire().await?;
    println!("acct:3 under token {:?}", both.token("acct:3"));
    both.release().await
}

// ---- not in the README: runs it.
#[test]
fn runs() {
    main().unwrap();
}
