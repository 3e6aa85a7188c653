use fencelock::redis_lock;

#[redis_lock(key = "job")]
async fn job() {}

#[redis_lock(key = "job")]
async fn pair() -> (u32, u32) {
    (1, 2)
}

fn main() {}
