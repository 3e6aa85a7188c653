//! The constructors of the stores whose cargo feature is off, so that calling one is a
//! compile error that names the feature to enable, rather than "no function named
//! `postgres`" with a suggestion of `memory`. No type meets their bound: they never run.

use std::convert::Infallible;
use std::future::Ready;

use crate::{LockClient, LockError};

/// For each constructor `name`, a stub whose argument must meet `Bound`, a trait no type
/// implements and whose unmet bound says `message` and `label`.
macro_rules! feature_off {
    ($Bound:ident, $message:literal, $label:literal, [$($connect:ident),+], [$($builder:ident),+]) => {
        #[doc(hidden)]
        #[diagnostic::on_unimplemented(message = $message, label = $label)]
        pub trait $Bound {
            /// Never called: no type implements the trait.
            fn never(self) -> !;
        }

        impl LockClient {
            $(
                #[doc(hidden)]
                pub fn $connect<Argument: $Bound>(
                    argument: Argument,
                ) -> Ready<Result<LockClient, LockError>> {
                    argument.never()
                }
            )+
            $(
                #[doc(hidden)]
                pub fn $builder<Argument: $Bound>(argument: Argument) -> Infallible {
                    argument.never()
                }
            )+
        }
    };
}

#[cfg(not(feature = "postgres"))]
feature_off!(
    PostgresFeatureOff,
    "`LockClient::postgres` needs fencelock's `postgres` feature",
    "enable it: fencelock = {{ version = \"…\", features = [\"postgres\"] }}",
    [postgres],
    [postgres_builder]
);

#[cfg(not(feature = "mysql"))]
feature_off!(
    MySqlFeatureOff,
    "`LockClient::mysql` needs fencelock's `mysql` feature",
    "enable it: fencelock = {{ version = \"…\", features = [\"mysql\"] }}",
    [mysql],
    [mysql_builder]
);

#[cfg(not(feature = "zookeeper"))]
feature_off!(
    ZooKeeperFeatureOff,
    "`LockClient::zookeeper` needs fencelock's `zookeeper` feature",
    "enable it: fencelock = {{ version = \"…\", features = [\"zookeeper\"] }}",
    [zookeeper],
    [zookeeper_builder]
);

#[cfg(not(feature = "etcd"))]
feature_off!(
    EtcdFeatureOff,
    "`LockClient::etcd` needs fencelock's `etcd` feature (and `protoc` to build it)",
    "enable it: fencelock = {{ version = \"…\", features = [\"etcd\"] }}",
    [etcd],
    [etcd_builder]
);
