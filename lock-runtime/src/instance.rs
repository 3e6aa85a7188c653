//! Instances: a client built with an instance id writes it into every owner token, so that
//! a restarted instance can find and release what its earlier run left behind (a process
//! killed while holding locks), and an operator can release what one instance holds.

use std::sync::OnceLock;

use crate::admin::{ForcedRelease, LockAdmin};
use crate::backend::{Grant, OperatorBackend};
use crate::{LockClient, LockError, random};

/// How long an instance id may be (a host's or a pod's name fits).
pub const MAX_INSTANCE_LEN: usize = 255;

/// How much of an owner token the instance takes: a token is this tag, a dot, the run's 8
/// hex digits, a dot and 24 random hex digits (90 random bits, from the OS source): 55
/// characters at most, so that a release's mark (`<owner>:released`) fits MySQL's 64.
const TAG_LEN: usize = 21;

/// The name of one instance of a service (a pod's or a host's name), the same on each of its
/// runs, and the run: drawn once per process, so that the clients of one process are one
/// run and never release each other's locks as left over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstanceId {
    /// The name as written into owner tokens (see [`instance_tag`]).
    tag: String,
    run: String,
}

impl InstanceId {
    /// The instance `name` of this process's run.
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
        Ok(InstanceId {
            tag: instance_tag(name)?,
            run: run.to_owned(),
        })
    }

    /// A fresh owner token of this run: `<tag>.<run>.<24 random hex digits>`.
    pub(crate) fn owner_token(&self) -> String {
        let random = &random::owner_token()[..24];
        format!("{}.{}.{random}", self.tag, self.run)
    }

    /// The owners of this instance's earlier runs.
    pub(crate) fn earlier_runs(&self) -> OwnerPrefix {
        OwnerPrefix {
            starts: format!("{}.", self.tag),
            except: Some(format!("{}.{}.", self.tag, self.run)),
        }
    }
}

/// How owner tokens carry the instance `name`: the name itself when it is at most
/// [`TAG_LEN`] ASCII letters, digits, `-` and `_`; else its first 12 characters so written
/// (others as `_`), `-` and 8 hex digits of its SHA-1, so that two long names that start
/// alike (`payments-worker-0`, `payments-worker-1`) stay two instances.
fn instance_tag(name: &str) -> Result<String, LockError> {
    if name.is_empty() || name.len() > MAX_INSTANCE_LEN || name.chars().any(char::is_control) {
        return Err(LockError::invalid_config(format!(
            "the instance id `{}` cannot name an instance: use 1 to {MAX_INSTANCE_LEN} bytes \
             without control characters, the same on every run (a pod's or a host's name)",
            name.escape_debug()
        )));
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.len() <= TAG_LEN && name.chars().all(plain) {
        return Ok(name.to_owned());
    }
    let start: String = name
        .chars()
        .take(12)
        .map(|c| if plain(c) { c } else { '_' })
        .collect();
    let digest = sha1_smol::Sha1::from(name).digest().to_string();
    Ok(format!("{start}-{}", &digest[..8]))
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
        Ok(OwnerPrefix {
            starts: format!("{}.", instance_tag(name)?),
            except: None,
        })
    }

    /// Every owner token that starts with `text` (every one, for an empty text; one, for a
    /// whole owner token: none is the start of another).
    #[cfg(feature = "testing")]
    pub(crate) fn starting(text: &str) -> OwnerPrefix {
        OwnerPrefix {
            starts: text.to_owned(),
            except: None,
        }
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
///
/// A key that could not be released (the store failed, or holds data that is not a lock's)
/// does not stop the others: it is in `failed`, and the sweep can be run again.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct InstanceRelease {
    /// The grants found, in every pass: those that held a key when the store was read (on
    /// ZooKeeper and etcd, every entry of those owners that holds a key, the store keeping no
    /// lease of its own).
    pub found: usize,
    /// The forced release of each grant found that was still held (the others ended on their
    /// own in between), in key order within each pass.
    pub released: Vec<ForcedRelease>,
    /// The keys whose grants could not be released, with why.
    pub failed: Vec<(String, LockError)>,
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

/// How many times the store is read for the grants left: a forced release hands a key to
/// the oldest waiter, who may be one of the same owners (the killed run waited for it too),
/// so the keys so handed are released again by the next pass.
const PASSES: usize = 4;

/// Releases by force each grant of `owners` in `client`'s store, pass after pass until one
/// finds none (at most [`PASSES`]), going on past a key that fails.
async fn release_owned(
    client: &LockClient,
    owners: &OwnerPrefix,
) -> Result<InstanceRelease, LockError> {
    let operator = operator(client)?;
    let mut report = InstanceRelease::default();
    for _ in 0..PASSES {
        let mut found = operator.grants_of_owners("*", owners).await?;
        found.retain(|owned| !report.failed.iter().any(|(key, _)| *key == owned.key));
        if found.is_empty() {
            break;
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        report.found += found.len();
        for owned in found {
            match operator.force_release(&owned.key, owned.grant).await {
                Ok(forced) if forced.released => report.released.push(forced),
                Ok(_) => {}
                Err(error) => report.failed.push((owned.key, error)),
            }
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
    }

    #[test]
    fn any_name_makes_a_token_whose_release_mark_fits_mysql() {
        let long = "payments-reconciliation-worker-";
        let names = [
            "web-1".to_owned(),
            "x".repeat(TAG_LEN),
            "x".repeat(MAX_INSTANCE_LEN),
            "ip-10-0-3-17.eu-west-1.compute.internal".to_owned(),
            format!("{long}0"),
            format!("{long}1"),
            "é ü".to_owned(),
        ];
        let tags: Vec<String> = names.iter().map(|n| instance_tag(n).unwrap()).collect();
        for (name, tag) in names.iter().zip(&tags) {
            let token = InstanceId::of_run(name, "0000aaaa").unwrap().owner_token();
            assert!(token.len() + ":released".len() <= 64, "{name}: {token}");
            assert!(
                tag.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            );
        }
        assert_eq!(tags[0], "web-1", "a short plain name is kept as it is");
        assert_ne!(tags[4], tags[5], "long names that start alike stay apart");
    }

    #[test]
    fn names_that_cannot_name_an_instance_are_refused() {
        for name in ["", "a\nb", &"x".repeat(MAX_INSTANCE_LEN + 1)] {
            let refused = InstanceId::new(name).unwrap_err().to_string();
            assert!(refused.contains("instance id"), "{refused}");
        }
    }
}
