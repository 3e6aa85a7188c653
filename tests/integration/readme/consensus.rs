//! The README's consensus example: the same function on ZooKeeper and on etcd.

use std::time::Duration;

use fencelock::{LockClient, LockError, current_token, lock, with_client};

#[lock(key = "ledger:{account}", ttl_ms = 30_000)]
async fn post_entry(account: u64) -> Result<u64, LockError> {
    // Send the fencing token with every write to the ledger: a holder frozen past its
    // session (a GC pause, a stalled VM) is refused there once the next holder has written.
    let token = current_token().unwrap_or_default();
    Ok(token.max(account))
}

async fn run(zookeeper: &str, etcd: &[String]) -> Result<(), LockError> {
    // "zk1:2181,zk2:2181,zk3:2181": every lock lives under /fencelock.
    let locks = LockClient::zookeeper_builder(zookeeper)
        .session_timeout(Duration::from_secs(10))
        .connect()
        .await?;
    with_client(locks, post_entry(7)).await?;

    // ["http://etcd1:2379", ...]: every lock lives under the prefix fencelock/.
    let locks = LockClient::etcd(etcd).await?;
    with_client(locks, post_entry(7)).await?;
    Ok(())
}

// ---- not in the README: runs it on private servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs() {
    use fencelock::testing::{EtcdCluster, ZooKeeperEnsemble};
    let zookeeper = ZooKeeperEnsemble::start(1).expect("ZooKeeper starts");
    let etcd = EtcdCluster::start(1).expect("etcd starts");
    run(&zookeeper.connect_string(), &etcd.endpoints())
        .await
        .unwrap();
}
