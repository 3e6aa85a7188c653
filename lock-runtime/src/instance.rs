//! Instances: a client built with an instance id writes it into every owner token, so that
//! a restarted instance can find and release what its earlier run left behind (a process
//! killed while holding locks), and an operator can release what one instance holds.

use std::sync::OnceLock;

use crate::admin::{ForcedRelease, LockAdmin};
use crate::backend::{Grant, OperatorBackend};
use crate::{LockClient, LockError, random};

/// How long an instance id may be: an owner token is the id, a dot, the run's 8 hex digits,
/// a dot and 24 random hex digits, and MySQL keeps owner tokens of up to 64 characters.
pub const MAX_INSTANCE_LEN: usize = 30;

/// The name of one instance of a service (`checkout-2`, a pod's name), the same on each of
/// its runs, and the run: drawn once per process, so that the clients of one process are one
/// run and never release each other's locks as left over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstanceId {
    name: String,
    run: String,
}

impl InstanceId {
    /// The instance `name` of this process's run; refuses a name that an owner token cannot
    /// carry.
    pub(crate) fn new(name: &str) -> Result<InstanceId, LockError> {
        static RUN: OnceLock<String> = OnceLock::new();
        let run = RUN.get_or_init(|| random::owner_token()[..8].to_owned());
        InstanceId::of_run(name, run)
    }

    /// The instance a builder was given, if any.
    pub(crate) fn of_setting(name: Option<&str>) -> Result<Option<InstanceId>, LockError> {
        name.map(InstanceId::new).transpose()
    }

    /// The instance `name` of the run `run` (tests stand for an earlier run with another).
    pub(crate) fn of_run(name: &str, run: &str) -> Result<InstanceId, LockError> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if name.is_empty() || name.len() > MAX_INSTANCE_LEN || !name.chars().all(allowed) {
            return Err(LockError::invalid_config(format!(
                "the instance id `{}` is not one fencelock can write into owner tokens: use \
                 1 to {MAX_INSTANCE_LEN} ASCII letters, digits, `-` or `_` (a pod's or a \
                 host's name, shortened)",
                name.escape_debug()
            )));
        }
        Ok(InstanceId {
            name: name.to_owned(),
            run: run.to_owned(),
        })
    }

    /// A fresh owner token of this run: `<name>.<run>.<24 random hex digits>` (96 random
    /// bits, from the OS source).
    pub(crate) fn owner_token(&self) -> String {
        format!(
            "{}.{}.{}",
            self.name,
            self.run,
            &random::owner_token()[..24]
        )
    }

    /// The owners of this instance's earlier runs.
    pub(crate) fn earlier_runs(&self) -> OwnerPrefix {
        OwnerPrefix {
            starts: format!("{}.", self.name),
            except: Some(format!("{}.{}.", self.name, self.run)),
        }
    }
}

/// Owner tokens that start with one text and not with another: how a store is asked for the
/// grants of an instance ([`OperatorBackend::grants_of_owners`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerPrefix {
    starts: String,
    except: Option<String>,
}

impl OwnerPrefix {
    /// The owners of every run of the instance `name` (as a client's
    /// `instance_id(name)` writes them).
    pub fn instance(name: &str) -> Result<OwnerPrefix, LockError> {
        let id = InstanceId::of_run(name, "")?;
        Ok(OwnerPrefix {
            starts: format!("{}.", id.name),
            except: None,
        })
    }

    /// The text every owner token meant starts with.
    pub fn starts(&self) -> &str {
        &self.starts
    }

    /// The text no owner token meant starts with, if any (a run that is not looked for).
    pub fn except(&self) -> Option<&str> {
        self.except.as_deref()
    }

    /// Whether `owner` is one of these owners.
    pub fn matches(&self, owner: &str) -> bool {
        owner.starts_with(&self.starts)
            && self
                .except
                .as_deref()
                .is_none_or(|except| !owner.starts_with(except))
    }
}

/// A grant found by [`OperatorBackend::grants_of_owners`]: the key it holds, and the grant as
/// a forced release names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnedGrant {
    /// The lock key.
    pub key: String,
    /// The grant.
    pub grant: Grant,
}

impl OwnedGrant {
    /// The grant `grant` of `key`.
    pub fn new(key: impl Into<String>, grant: Grant) -> OwnedGrant {
        OwnedGrant {
            key: key.into(),
            grant,
        }
    }
}

/// What [`LockClient::release_orphans`] and [`LockAdmin::release_instance`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceRelease {
    /// The grants found (live grants of the owners looked for, when the store was read).
    pub found: usize,
    /// The forced release of each grant found that was still held (the others ended on their
    /// own in between), in key order.
    pub released: Vec<ForcedRelease>,
}

impl LockClient {
    /// Releases, at once, the locks an earlier run of this client's instance left held: the
    /// grants whose owner tokens carry this client's
    /// [instance id](crate::OpenBuilder::instance_id) but were written by another process.
    /// Call it when the instance starts, before it takes locks: a process killed while holding
    /// locks (`SIGKILL`, a crash, a lost machine) cannot release them, and they would stay
    /// held until their leases end. Each is ended as
    /// [`LockAdmin::force_release_of`] ends a grant: the next waiter gets the key with a
    /// greater fencing token.
    ///
    /// The id must name one live process at a time: a second process started with the same id
    /// while the first still runs would take the first one's locks (the first learns it at its
    /// next renewal, as on any loss).
    ///
    /// Fails with [`LockError::InvalidConfig`] on a client built without an instance id. On
    /// Redis it is a `SCAN` of the client's keys (never `KEYS`), as
    /// [`LockAdmin::list`] is.
    pub async fn release_orphans(&self) -> Result<InstanceRelease, LockError> {
        let instance = self.instance().ok_or_else(|| {
            LockError::invalid_config(
                "this client has no instance id, so it cannot tell an earlier run's locks: \
                 build it with `.instance_id(\"<name>\")` (the same name on every run)",
            )
        })?;
        release_owned(self, &instance.earlier_runs()).await
    }
}

impl LockAdmin {
    /// Releases by force every grant of every run of the instance `name` (see
    /// [`LockClient::release_orphans`]), also those of a process still running, which learns
    /// of it at its next renewal: for an operator who knows that instance is gone.
    pub async fn release_instance(&self, name: &str) -> Result<InstanceRelease, LockError> {
        release_owned(self.client(), &OwnerPrefix::instance(name)?).await
    }
}

/// Releases by force each grant of `owners` in `client`'s store.
async fn release_owned(
    client: &LockClient,
    owners: &OwnerPrefix,
) -> Result<InstanceRelease, LockError> {
    let operator = operator(client)?;
    let mut found = operator.grants_of_owners("*", owners).await?;
    found.sort_by(|a, b| a.key.cmp(&b.key));
    let mut report = InstanceRelease {
        found: found.len(),
        released: Vec::new(),
    };
    for owned in found {
        let forced = operator.force_release(&owned.key, owned.grant).await?;
        if forced.released {
            report.released.push(forced);
        }
    }
    Ok(report)
}

fn operator(client: &LockClient) -> Result<&dyn OperatorBackend, LockError> {
    client
        .backend()
        .operator()
        .ok_or_else(|| crate::backend::not_offered("releasing an instance's locks"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_finds_its_earlier_runs_only() {
        let now = InstanceId::of_run("web-1", "0000aaaa").unwrap();
        let before = InstanceId::of_run("web-1", "1111bbbb").unwrap();
        let other = InstanceId::of_run("web-10", "1111bbbb").unwrap();
        let earlier = now.earlier_runs();
        assert!(earlier.matches(&before.owner_token()));
        assert!(!earlier.matches(&now.owner_token()));
        assert!(
            !earlier.matches(&other.owner_token()),
            "web-10 is not web-1"
        );
        assert!(!earlier.matches(&random::owner_token()));
        let every = OwnerPrefix::instance("web-1").unwrap();
        assert!(every.matches(&now.owner_token()) && every.matches(&before.owner_token()));
        assert!(now.owner_token().len() <= 64 - (MAX_INSTANCE_LEN - "web-1".len()));
    }

    #[test]
    fn names_an_owner_token_cannot_carry_are_refused() {
        for name in [
            "",
            "a.b",
            "a b",
            "a:b",
            "é",
            &"x".repeat(MAX_INSTANCE_LEN + 1),
        ] {
            let refused = InstanceId::new(name).unwrap_err().to_string();
            assert!(refused.contains("instance id"), "{refused}");
        }
        let longest = InstanceId::new(&"x".repeat(MAX_INSTANCE_LEN)).unwrap();
        assert_eq!(longest.owner_token().len(), 64);
    }
}
