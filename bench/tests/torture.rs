//! The short version of every fault scenario (3 s each, the SQL ones 6 s): the torture
//! binary exits non-zero when a scenario breaks its promise or proves too little (a worker
//! that never reached the store, fewer sections than the scenario's floor, a fault that did
//! not hit), and prints its figures either way.

use std::process::Command;

fn scenario(name: &str) {
    scenarios(&[name]);
}

/// Runs `names` one after the other, in one torture process, 3 s each.
fn scenarios(names: &[&str]) {
    scenarios_for(3, names);
}

/// Runs `names` one after the other, in one torture process, `seconds` each.
fn scenarios_for(seconds: u32, names: &[&str]) {
    let name = names.join(", ");
    let output = Command::new(env!("CARGO_BIN_EXE_torture"))
        .args(["--seconds", &seconds.to_string()])
        .args(names)
        .output()
        .expect("the torture binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("{stdout}");
    assert!(
        output.status.success(),
        "scenario {name} broke its promise:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn no_faults() {
    scenario("no-faults");
}

#[test]
fn a_holder_killed_with_sigkill() {
    scenario("holder-sigkill");
}

#[test]
fn client_connections_killed() {
    scenario("client-kill");
}

#[test]
fn latency_and_cut_connections() {
    scenario("latency-and-cuts");
}

#[test]
fn redis_frozen_longer_than_the_ttl() {
    scenario("redis-sigstop");
}

#[test]
fn redis_paused_longer_than_the_ttl() {
    scenario("client-pause");
}

#[test]
fn redis_blocked_by_debug_sleep() {
    scenario("debug-sleep");
}

#[test]
fn a_holder_frozen_inside_its_section() {
    scenario("holder-sigstop");
}

#[test]
fn the_server_clock_jumping_forward() {
    scenario("clock-jump");
}

#[test]
fn redis_restarted_without_its_data() {
    scenario("redis-restart");
}

#[test]
fn redlock_with_two_of_five_masters_killed() {
    scenario("redlock-two-of-five-killed");
}

#[test]
fn redlock_masters_restarted_without_their_data() {
    scenario("redlock-restart");
}

#[test]
fn sentinel_failover() {
    scenario("sentinel-failover");
}

#[test]
fn sentinel_failover_with_min_replicas() {
    scenario("sentinel-failover-min-replicas");
}

#[test]
fn cluster_failover() {
    scenario("cluster-failover");
}

#[test]
fn cluster_master_killed() {
    scenario("cluster-master-sigkill");
}

/// The SQL backends' scenarios, one after the other: two of them restart the machine's
/// database servers (as root), which a scenario running beside them would feel. 6 s each:
/// under cuts every 500 ms, a worker process started on a loaded machine can take 3 s to
/// hold a connection long enough for an answer.
#[test]
fn sql_backends_under_faults() {
    scenarios_for(
        6,
        &[
            "postgres-holder-sigkill",
            "postgres-holder-sigstop",
            "postgres-latency-and-cuts",
            "postgres-restart",
            "mysql-holder-sigkill",
            "mysql-holder-sigstop",
            "mysql-latency-and-cuts",
            "mysql-restart",
        ],
    );
}

/// ZooKeeper's scenarios, each on an ensemble of three JVMs of its own: run one after the
/// other, so that two ensembles never share the machine's two cores.
#[test]
fn zookeeper_under_faults() {
    scenarios(&[
        "zookeeper-holder-sigkill",
        "zookeeper-holder-sigstop",
        "zookeeper-member-killed",
        "zookeeper-leader-killed",
    ]);
}

/// etcd's scenarios, each on a cluster of three members of its own.
#[test]
fn etcd_under_faults() {
    scenarios(&[
        "etcd-holder-sigkill",
        "etcd-holder-sigstop",
        "etcd-member-killed",
        "etcd-leader-killed",
    ]);
}

/// The lock kinds on one Redis server: read/write locks, semaphores and segmented locks, each
/// with a holder killed and frozen, the server restarted without its data, and cut
/// connections; checked on their recorded histories (no reader beside a writer, no more
/// holders than permits, no shard held twice; tokens in order).
#[test]
fn lock_kinds_under_faults() {
    let faults = [
        "holder-sigkill",
        "holder-sigstop",
        "redis-restart",
        "latency-and-cuts",
    ];
    let names: Vec<String> = ["read-write", "semaphore", "segmented"]
        .iter()
        .flat_map(|kind| faults.iter().map(move |fault| format!("{kind}-{fault}")))
        .collect();
    scenarios(&names.iter().map(String::as_str).collect::<Vec<_>>());
}
