//! The etcd backend on private etcd servers (Debian's `etcd-server` package, run as child
//! processes): the conformance suite, and what leases and clusters do to locks.

use fencelock::LockClient;
use fencelock::testing::{EtcdCluster, conformance};

fn cluster(size: usize) -> EtcdCluster {
    EtcdCluster::start(size).expect("etcd starts (apt-get install etcd-server)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_the_conformance_suite() {
    let server = cluster(1);
    let client = LockClient::etcd(&server.endpoints())
        .await
        .expect("connects");
    conformance::run(&client, "conformance").await;
}
