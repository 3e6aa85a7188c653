//! The README's test against a private `redis-server`.

use fencelock::testing::RedisServer;
use fencelock::{LockClient, LockError};

#[tokio::test]
async fn two_clients_exclude_each_other() -> Result<(), Box<dyn std::error::Error>> {
    let server = RedisServer::start()?;
    let a = LockClient::connect(&server.url()).await?;
    let b = LockClient::connect(&server.url()).await?;

    let guard = a.lock("job:1").acquire().await?;
    let refused = b.lock("job:1").give_up().acquire().await;
    assert!(matches!(refused, Err(LockError::NotAcquired { .. })));
    guard.release().await?;
    Ok(())
}
