//! What only a real compile can show about `#[redis_lock]`. `tests/ui/fail`: rustc's
//! trait errors (a `client` that is no lock client, an error type without
//! `From<LockError>`, a placeholder value that is not `Display`), the output of the real
//! `#[async_trait]`, and errors of every stage in one compile with the item kept.
//! `tests/ui/pass`: shapes that must compile, such as either order with
//! `#[tracing::instrument]`. The macro's own errors, message and span, are unit tests in
//! `lock-macros/src/error_tests.rs`.
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test --all-features --test ui`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
