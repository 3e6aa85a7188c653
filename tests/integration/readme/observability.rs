//! The README's spans and metrics: a global subscriber and a Prometheus recorder.
#![allow(dead_code)]

use fencelock::{LockClient, LockError, redis_lock};
use metrics_exporter_prometheus::PrometheusBuilder;

#[redis_lock(key = "report:{day}")]
async fn build_report(day: u32) -> Result<u32, LockError> {
    tracing::info!("building the report"); // an event in the call's `fencelock.lock` span
    Ok(day)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Global: renewal and background releases report from the library's own thread.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .init();
    let recorder = PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    fencelock::telemetry::describe_metrics();

    fencelock::with_client(LockClient::memory(), build_report(7)).await?;
    // What a /metrics endpoint would serve.
    println!("{}", prometheus.render());
    Ok(())
}

// ---- not in the README: the call's metrics, as Prometheus reads them (recorded on this
// thread only: the test binary's other tests record nothing here).
#[test]
fn the_call_is_counted_under_its_key_template() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let call = fencelock::with_client(LockClient::memory(), build_report(7));
        assert_eq!(runtime.block_on(call).unwrap(), 7);
    });
    let text = prometheus.render();
    assert!(
        text.contains(r#"fencelock_acquisitions_total{lock="report:{day}",outcome="granted"} 1"#),
        "{text}"
    );
    assert!(text.contains("fencelock_hold_seconds"), "{text}");
}
