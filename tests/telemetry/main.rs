//! Spans and metrics (`fencelock::telemetry`), read through a global subscriber and a global
//! metrics recorder: a test binary of their own, so that no other test's locks are recorded.

mod capture;
mod metrics;
mod paths;
mod spans;
