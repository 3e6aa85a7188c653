//! What the tests read fencelock's telemetry from: a global tracing subscriber that records
//! every span and event, and a global metrics recorder. Global, because renewal and
//! background releases run on the library's own thread; tests tell their records apart by
//! their keys and lock names.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, Once};
use std::time::Duration;

use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::sync::Notify;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// A span as recorded: its own number (the subscriber's ids are reused), its parent's, and
/// every field recorded on it.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub seq: u64,
    pub name: &'static str,
    pub target: String,
    pub level: Level,
    pub parent: Option<u64>,
    pub fields: BTreeMap<String, String>,
    pub closed: bool,
    /// Fields recorded more than once (a `fmt` subscriber prints each recording), with every
    /// value they were given.
    pub rerecorded: BTreeMap<String, Vec<String>>,
}

impl SpanRecord {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Debug, Clone)]
pub struct EventRecord {
    pub level: Level,
    pub parent: Option<u64>,
    pub fields: BTreeMap<String, String>,
}

impl EventRecord {
    pub fn message(&self) -> &str {
        self.fields.get("message").map_or("", String::as_str)
    }
}

#[derive(Default)]
struct Records {
    spans: Vec<SpanRecord>,
    events: Vec<EventRecord>,
}

static RECORDS: LazyLock<Mutex<Records>> = LazyLock::new(Mutex::default);
static CHANGED: Notify = Notify::const_new();
static SNAPSHOTTER: LazyLock<Snapshotter> = LazyLock::new(|| {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("no other metrics recorder");
    snapshotter
});

fn records() -> MutexGuard<'static, Records> {
    RECORDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Installs the subscriber and the recorder, once per test binary.
pub fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        tracing_subscriber::registry().with(Recording).init();
        LazyLock::force(&SNAPSHOTTER);
    });
}

/// The `fencelock.lock` spans whose `key` is `key`, oldest first.
pub fn lock_spans(key: &str) -> Vec<SpanRecord> {
    spans_where(|span| span.name == "fencelock.lock" && span.field("key") == Some(key))
}

pub fn spans_where(keep: impl Fn(&SpanRecord) -> bool) -> Vec<SpanRecord> {
    records()
        .spans
        .iter()
        .filter(|s| keep(s))
        .cloned()
        .collect()
}

/// The events recorded directly under the span numbered `seq`.
pub fn events_under(seq: u64) -> Vec<EventRecord> {
    let records = records();
    records
        .events
        .iter()
        .filter(|e| e.parent == Some(seq))
        .cloned()
        .collect()
}

/// Every value recorded so far, in spans and events.
pub fn every_recorded_value() -> Vec<String> {
    let records = records();
    let spans = records.spans.iter().flat_map(|s| s.fields.values());
    let events = records.events.iter().flat_map(|e| e.fields.values());
    spans.chain(events).cloned().collect()
}

/// Waits until `found` gives a value for what was recorded (it is asked again after every
/// new record), for at most 10 s.
pub async fn wait_for<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let waiting = async {
        loop {
            let changed = CHANGED.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(value) = found() {
                return value;
            }
            changed.await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap_or_else(|_| panic!("not recorded within 10 s: {what}"))
}

/// The one `fencelock.lock` span of `key`, once it is closed.
pub async fn closed_lock_span(key: &str) -> SpanRecord {
    wait_for(&format!("the closed span of {key}"), || {
        let spans = lock_spans(key);
        assert!(spans.len() <= 1, "several spans for {key}: {spans:#?}");
        spans.into_iter().find(|s| s.closed)
    })
    .await
}

/// Records spans and events into [`RECORDS`].
struct Recording;

/// A span's number, kept in its extensions.
struct Seq(u64);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recording {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let seq = NEXT.fetch_add(1, Ordering::Relaxed);
        let span = ctx.span(id).expect("a new span is in the registry");
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<Seq>().map(|s| s.0));
        span.extensions_mut().insert(Seq(seq));
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let metadata = attrs.metadata();
        records().spans.push(SpanRecord {
            seq,
            name: metadata.name(),
            target: metadata.target().to_owned(),
            level: *metadata.level(),
            parent,
            fields: fields.0,
            closed: false,
            rerecorded: BTreeMap::new(),
        });
        CHANGED.notify_waiters();
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(seq) = seq_of(&ctx, id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        if let Some(span) = records().spans.iter_mut().find(|s| s.seq == seq) {
            for (name, value) in fields.0 {
                if let Some(old) = span.fields.insert(name.clone(), value.clone()) {
                    let values = span.rerecorded.entry(name).or_insert_with(|| vec![old]);
                    values.push(value);
                }
            }
        }
        CHANGED.notify_waiters();
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let parent = ctx
            .event_span(event)
            .and_then(|span| span.extensions().get::<Seq>().map(|s| s.0));
        let mut fields = Fields::default();
        event.record(&mut fields);
        hold_back_if_asked(&fields);
        records().events.push(EventRecord {
            level: *event.metadata().level(),
            parent,
            fields: fields.0,
        });
        CHANGED.notify_waiters();
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(seq) = seq_of(&ctx, &id) else { return };
        if let Some(span) = records().spans.iter_mut().find(|s| s.seq == seq) {
            span.closed = true;
        }
        CHANGED.notify_waiters();
    }
}

fn seq_of<S: Subscriber + for<'a> LookupSpan<'a>>(ctx: &Context<'_, S>, id: &Id) -> Option<u64> {
    ctx.span(id)?.extensions().get::<Seq>().map(|s| s.0)
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// A metric, by kind, name and labels (sorted).
type MetricId = (MetricKind, String, Vec<(String, String)>);

/// The recorder's values summed over its snapshots: a snapshot drains every counter, gauge
/// (fencelock only adds to and takes from its gauge) and histogram.
#[derive(Default)]
struct Totals {
    sums: HashMap<MetricId, f64>,
    samples: HashMap<MetricId, Vec<f64>>,
}

static TOTALS: LazyLock<Mutex<Totals>> = LazyLock::new(Mutex::default);

fn totals() -> MutexGuard<'static, Totals> {
    let mut totals = TOTALS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for (key, _, _, value) in SNAPSHOTTER.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let id = (kind, key.name().to_owned(), labels);
        match value {
            DebugValue::Counter(n) => *totals.sums.entry(id).or_default() += n as f64,
            DebugValue::Gauge(g) => *totals.sums.entry(id).or_default() += g.into_inner(),
            DebugValue::Histogram(values) => totals
                .samples
                .entry(id)
                .or_default()
                .extend(values.into_iter().map(|v| v.into_inner())),
        }
    }
    totals
}

fn id(kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> MetricId {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (kind, name.to_owned(), labels)
}

/// A counter's value so far.
pub fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    let sum = totals()
        .sums
        .get(&id(MetricKind::Counter, name, labels))
        .copied();
    sum.unwrap_or(0.0) as u64
}

/// A gauge's value.
pub fn gauge(name: &str, labels: &[(&str, &str)]) -> f64 {
    let sum = totals()
        .sums
        .get(&id(MetricKind::Gauge, name, labels))
        .copied();
    sum.unwrap_or(0.0)
}

/// Every value a histogram recorded so far.
pub fn histogram(name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    totals()
        .samples
        .get(&id(MetricKind::Histogram, name, labels))
        .cloned()
        .unwrap_or_default()
}

/// Renewal warnings of keys starting with a prefix wait in the subscriber until let go, as
/// they would in a subscriber that blocks; and whether one is waiting.
static HELD_BACK: Mutex<(Option<String>, bool)> = Mutex::new((None, false));
static LET_GO: Condvar = Condvar::new();

/// From now on, `lock renewal failed` events whose key starts with `prefix` wait in the
/// subscriber until [`let_go`].
pub fn hold_back_renewal_warnings(prefix: &str) {
    HELD_BACK.lock().unwrap().0 = Some(prefix.to_owned());
}

/// Whether a held-back event waits in the subscriber now.
pub fn one_is_held_back() -> bool {
    HELD_BACK.lock().unwrap().1
}

/// Lets held-back events through, and no more are held back.
pub fn let_go() {
    HELD_BACK.lock().unwrap().0 = None;
    LET_GO.notify_all();
}

fn hold_back_if_asked(fields: &Fields) {
    let renewal = |m: &String| m.starts_with("lock renewal failed");
    if !fields.0.get("message").is_some_and(renewal) {
        return;
    }
    let mut held = HELD_BACK.lock().unwrap();
    let matches = |held: &(Option<String>, bool)| {
        let key = fields.0.get("key");
        held.0
            .as_ref()
            .is_some_and(|p| key.is_some_and(|k| k.starts_with(p)))
    };
    if !matches(&held) {
        return;
    }
    held.1 = true;
    CHANGED.notify_waiters();
    // Bounded: a test that never lets go fails on its own, not by hanging here.
    let (mut held, _) = LET_GO
        .wait_timeout_while(held, Duration::from_secs(10), |held| matches(held))
        .unwrap();
    held.1 = false;
}
