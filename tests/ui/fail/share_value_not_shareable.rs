use fencelock::{LockError, redis_lock};

/// Neither `Clone` nor serde's traits: it cannot be handed to the other callers.
struct Report {
    lines: u32,
}

#[redis_lock(key = "report:{day}", action = Share)]
async fn report(day: u32) -> Result<Report, LockError> {
    Ok(Report { lines: day })
}

fn main() {}
