//! The ZooKeeper backend on private ZooKeeper servers (Debian's `zookeeper` package, run as
//! child JVMs): the conformance suite, exclusion across processes on recorded histories, and
//! what sessions and ensembles do to locks.

use fencelock::LockClient;
use fencelock::testing::{ZooKeeperEnsemble, conformance};

fn ensemble(size: usize) -> ZooKeeperEnsemble {
    ZooKeeperEnsemble::start(size).expect("ZooKeeper starts (apt-get install zookeeper)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_the_conformance_suite() {
    let server = ensemble(1);
    let client = LockClient::zookeeper(&server.connect_string())
        .await
        .expect("connects");
    conformance::run(&client, "conformance").await;
}
