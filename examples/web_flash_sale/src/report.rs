//! What a load run did, counted from the replies and from the store, as a table.

use std::time::Duration;

use hyper::StatusCode;

use crate::load::Reply;

/// A finished load run.
pub struct Report {
    pub instances: usize,
    pub concurrency: usize,
    /// Units on sale when the run started.
    pub initial_stock: i64,
    /// Units sold by the store's own count (one atomic increment per sale).
    pub sold_in_store: i64,
    /// Stock the store holds after the run.
    pub stock_left: i64,
    pub replies: Vec<Reply>,
    pub elapsed: Duration,
}

impl Report {
    fn count(&self, status: StatusCode) -> usize {
        self.replies
            .iter()
            .filter(|reply| reply.status.as_ref() == Ok(&status))
            .count()
    }

    fn accepted(&self) -> usize {
        self.count(StatusCode::OK)
    }

    fn refused(&self) -> usize {
        self.count(StatusCode::TOO_MANY_REQUESTS)
    }

    fn sold_out(&self) -> usize {
        self.count(StatusCode::GONE)
    }

    fn errors(&self) -> usize {
        self.replies.len() - self.accepted() - self.refused() - self.sold_out()
    }

    /// Units sold beyond those taken from the stock, by the store: each sale takes one unit,
    /// so every sale past `initial − left` sold a unit that another sale had sold too.
    fn oversold_in_store(&self) -> i64 {
        self.sold_in_store - (self.initial_stock - self.stock_left)
    }

    /// Orders accepted beyond the units there were, by the replies.
    fn oversold_in_replies(&self) -> i64 {
        (self.accepted() as i64 - self.initial_stock).max(0)
    }

    /// The first failed order's status or error, if any failed.
    fn first_error(&self) -> Option<String> {
        let expected = [
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::GONE,
        ];
        self.replies.iter().find_map(|reply| match &reply.status {
            Ok(status) if expected.contains(status) => None,
            Ok(status) => Some(format!("status {status}")),
            Err(e) => Some(e.clone()),
        })
    }

    /// What a run with the lock must not show: an oversold unit, a failed order, or replies
    /// that disagree with the store.
    pub fn violations(&self) -> Vec<String> {
        let mut violations = Vec::new();
        if self.oversold_in_store() != 0 {
            violations.push(format!(
                "the store sold {} unit(s) more than it took from stock",
                self.oversold_in_store()
            ));
        }
        if self.oversold_in_replies() > 0 {
            violations.push(format!(
                "{} order(s) accepted beyond the stock",
                self.oversold_in_replies()
            ));
        }
        if self.sold_in_store != self.accepted() as i64 {
            violations.push(format!(
                "the store counted {} sale(s) for {} accepted order(s)",
                self.sold_in_store,
                self.accepted()
            ));
        }
        if let Some(error) = self.first_error() {
            violations.push(format!(
                "{} order(s) failed, the first with: {error}",
                self.errors()
            ));
        }
        violations
    }

    /// Prints the run as a table.
    pub fn print(&self) {
        let mut latencies: Vec<Duration> = self.replies.iter().map(|reply| reply.latency).collect();
        latencies.sort_unstable();
        let seconds = self.elapsed.as_secs_f64();
        println!(
            "{} orders to {} instances, {} in flight, stock {}",
            self.replies.len(),
            self.instances,
            self.concurrency,
            self.initial_stock
        );
        row("accepted (200)", self.accepted());
        row("refused, lock busy (429)", self.refused());
        row("sold out (410)", self.sold_out());
        row("errors", self.errors());
        row("sold, by the store", self.sold_in_store);
        row("stock left, by the store", self.stock_left);
        row(
            "oversold, store / replies",
            format!(
                "{} / {}",
                self.oversold_in_store(),
                self.oversold_in_replies()
            ),
        );
        row(
            "latency p50 / p99 / max",
            format!(
                "{:.1} / {:.1} / {:.1} ms",
                millis(percentile(&latencies, 50)),
                millis(percentile(&latencies, 99)),
                millis(latencies.last().copied().unwrap_or_default())
            ),
        );
        row(
            "throughput",
            format!(
                "{:.0} orders/s ({seconds:.2} s)",
                self.replies.len() as f64 / seconds
            ),
        );
    }
}

fn row(name: &str, value: impl std::fmt::Display) {
    println!("  {name:<27} {value:>22}");
}

/// The nearest-rank percentile of sorted durations (zero when there are none).
fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    let rank = (sorted.len() * percent).div_ceil(100);
    sorted
        .get(rank.saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(accepted: usize, sold_in_store: i64, stock_left: i64) -> Report {
        let replies = (0..accepted)
            .map(|_| Reply {
                status: Ok(StatusCode::OK),
                latency: Duration::from_millis(1),
            })
            .collect();
        Report {
            instances: 3,
            concurrency: 4,
            initial_stock: 10,
            sold_in_store,
            stock_left,
            replies,
            elapsed: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_clean_sale_has_no_violation() {
        assert!(report(10, 10, 0).violations().is_empty());
    }

    #[test]
    fn oversold_is_counted_from_the_store_even_when_the_replies_look_right() {
        // 10 sales recorded, but two buyers wrote the same stock back twice: 2 units left.
        let violations = report(10, 10, 2).violations();
        assert_eq!(
            violations,
            ["the store sold 2 unit(s) more than it took from stock"]
        );
    }

    #[test]
    fn replies_beyond_the_stock_and_disagreeing_with_the_store_are_violations() {
        let violations = report(12, 10, 0).violations();
        assert_eq!(
            violations,
            [
                "2 order(s) accepted beyond the stock",
                "the store counted 10 sale(s) for 12 accepted order(s)"
            ]
        );
    }

    #[test]
    fn a_failed_order_is_a_violation() {
        let mut run = report(10, 10, 0);
        run.replies.push(Reply {
            status: Err("connection reset".to_owned()),
            latency: Duration::from_millis(1),
        });
        assert_eq!(
            run.violations(),
            ["1 order(s) failed, the first with: connection reset"]
        );
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted: Vec<Duration> = (1..=200).map(Duration::from_millis).collect();
        assert_eq!(percentile(&sorted, 50), Duration::from_millis(100));
        assert_eq!(percentile(&sorted, 99), Duration::from_millis(198));
        assert_eq!(percentile(&[], 99), Duration::ZERO);
    }
}
