//! Summaries of what the workloads recorded.

use std::time::Duration;

/// Mean, percentiles and maximum of a set of durations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    pub count: usize,
    pub mean: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    pub max: Duration,
}

impl Summary {
    /// All zero for no samples: a workload whose every call failed still gets a row.
    pub fn of(mut samples: Vec<Duration>) -> Summary {
        let Some(&max) = samples.iter().max() else {
            return Summary::default();
        };
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
        Summary {
            count: samples.len(),
            mean: samples.iter().sum::<Duration>() / samples.len() as u32,
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max,
        }
    }
}

/// Failed calls of a workload, and the first error, for the report.
#[derive(Debug, Default)]
pub struct Failures {
    pub count: u64,
    pub first: Option<String>,
}

impl Failures {
    pub fn record(&mut self, error: String) {
        self.count += 1;
        self.first.get_or_insert(error);
    }

    pub fn merge(&mut self, other: Failures) {
        self.count += other.count;
        if let Some(error) = other.first {
            self.first.get_or_insert(error);
        }
    }
}
