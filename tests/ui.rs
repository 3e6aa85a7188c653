//! Compile-time checks of `#[redis_lock]`: every misconfiguration is an error on the
//! offending token with a message that says how to fix it (`tests/ui/fail`), and the
//! attribute composes with `#[tracing::instrument]` in either order (`tests/ui/pass`).
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test --test ui`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
