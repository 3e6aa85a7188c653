use fencelock::redis_lock;

#[derive(Debug)]
struct MyError;

#[redis_lock(key = "job")]
async fn job() -> Result<u32, MyError> {
    Ok(1)
}

#[redis_lock(key = "job")]
async fn maybe() -> Option<u32> {
    Some(1)
}

fn main() {}
