use fencelock::LockClient;

#[tokio::main]
async fn main() {
    let _ = LockClient::postgres("postgres://app@127.0.0.1/locks").await;
    let _ = LockClient::mysql("mysql://root@127.0.0.1/test").await;
    let _ = LockClient::zookeeper("127.0.0.1:2181").await;
    let _ = LockClient::etcd(["http://127.0.0.1:2379"]).await;
}
