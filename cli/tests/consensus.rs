//! The `fencelock` command on the consensus stores, through the same URLs as
//! `LockClient::open`: a lock held in ZooKeeper and in etcd is listed, inspected and released
//! by force, and an unreachable store is one line saying so.

#![cfg(all(feature = "zookeeper", feature = "etcd"))]

mod support;

use fencelock::LockClient;
use fencelock::testing::{EtcdCluster, ZooKeeperEnsemble};

use support::fencelock;

/// `fencelock --url URL ARGS`.
async fn on(url: &str, args: &[&str]) -> support::Run {
    let mut all = vec!["--url", url];
    all.extend_from_slice(args);
    fencelock(&all).await
}

async fn a_lock_is_listed_inspected_and_released(url: &str) {
    let locks = LockClient::open(url).await.expect("the store's URL opens");
    let guard = locks.lock("stock:42").acquire().await.unwrap();
    let listed = on(url, &["list", "--json"]).await.json();
    assert_eq!(listed[0]["key"], "stock:42", "{url}: {listed}");
    assert_eq!(listed[0]["token"], guard.token(), "{url}: {listed}");
    assert_eq!(listed[0]["state"], "held", "{url}: {listed}");
    let inspected = on(url, &["inspect", "stock:42", "--json"]).await.json();
    assert_eq!(inspected["token"], guard.token(), "{url}: {inspected}");
    let forced = on(url, &["release", "stock:42", "--force", "--yes", "--json"])
        .await
        .json();
    assert_eq!(forced["released"], true, "{url}: {forced}");
    let inspected = on(url, &["inspect", "stock:42", "--json"]).await.json();
    assert_eq!(inspected["state"], "free", "{url}: {inspected}");
    assert!(guard.release().await.unwrap_err().is_lost(), "{url}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_zookeeper_a_lock_is_listed_inspected_and_released() {
    let ensemble = ZooKeeperEnsemble::start(1).expect("ZooKeeper starts");
    a_lock_is_listed_inspected_and_released(&ensemble.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_a_lock_is_listed_inspected_and_released() {
    let cluster = EtcdCluster::start(1).expect("etcd starts");
    a_lock_is_listed_inspected_and_released(&cluster.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_consensus_store_is_one_line_naming_it() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    for (url, store) in [
        (format!("zookeeper://127.0.0.1:{port}"), "ZooKeeper"),
        (format!("etcd://127.0.0.1:{port}"), "etcd"),
    ] {
        let failed = on(&url, &["list"]).await.failed_with_one_line();
        assert!(
            failed.contains("cannot connect") && failed.contains(store),
            "{url}: {failed}"
        );
    }
}
