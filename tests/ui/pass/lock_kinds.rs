use fencelock::{LockClient, LockError, current_shard, redis_lock};

const PERMITS: u32 = 3;

mod limits {
    pub const SHARDS: u32 = 8;
}

#[redis_lock(key = "catalog", client = LockClient::memory(), mode = Read)]
async fn read() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(key = "catalog", client = LockClient::memory(), mode = Write, fair = true)]
async fn write() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(key = "exports", client = LockClient::memory(), permits = 2)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(key = "imports", client = LockClient::memory(), permits = PERMITS)]
async fn import() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(key = "stock", client = LockClient::memory(), shards = 16)]
async fn take() -> Result<u32, LockError> {
    Ok(current_shard().expect("a segmented lock's body holds a shard"))
}

#[redis_lock(key = "stock", client = LockClient::memory(), shards = limits::SHARDS * 2)]
async fn take_more() -> Result<u32, LockError> {
    Ok(current_shard().expect("a segmented lock's body holds a shard"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    read().await.unwrap();
    write().await.unwrap();
    export().await.unwrap();
    import().await.unwrap();
    assert!(take().await.unwrap() < 16);
    assert!(take_more().await.unwrap() < 16);
}
