//! Built without the stores' features (`scripts/test.sh` runs it so): calling the constructor
//! of a store whose feature is off is a compile error that names the feature.
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test --test feature_off`.

#![cfg(not(any(
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper",
    feature = "etcd"
)))]

#[test]
fn a_store_whose_feature_is_off_is_a_compile_error_naming_it() {
    trybuild::TestCases::new().compile_fail("tests/feature_off/*.rs");
}
