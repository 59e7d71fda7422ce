//! A pass's view of the store: every record read at once, decoded and checked, with what
//! this version cannot read quarantined and named. The pass and the invariant checker both
//! start from it.

use std::collections::{BTreeMap, BTreeSet};

use crate::spec::{Assignment, Deployment, Node, parse_assignment_key};
use crate::store::{ASSIGNMENTS, DEPLOYMENTS, NODES, Store, StoreError, Versioned};

/// Everything read from the store, with revisions.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub deployments: BTreeMap<String, (Deployment, u64)>,
    pub nodes: BTreeMap<String, (Node, u64)>,
    pub assignments: BTreeMap<String, (Assignment, u64)>,
    /// Records this version cannot use (they do not parse, fail their checks, or their key
    /// does not match their name), with why. They are left as they are: what is bound to a
    /// quarantined deployment or node is never released, and a quarantined assignment (whose
    /// capacity is unknown) stops placements until it is fixed.
    pub quarantined: Vec<(String, String)>,
}

impl Snapshot {
    /// Reads every record (at one revision, where the store can).
    ///
    /// # Errors
    /// The store is unavailable.
    pub fn load(store: &mut impl Store) -> Result<Snapshot, StoreError> {
        let mut lists = store.list_many(&[DEPLOYMENTS, NODES, ASSIGNMENTS])?.into_iter();
        let mut snapshot = Snapshot::default();
        let deployments = lists.next().unwrap_or_default();
        snapshot.deployments = named(deployments, DEPLOYMENTS, &mut snapshot.quarantined, |d: &Deployment| {
            d.check().map(|()| d.name.as_str()).map_err(|e| e.to_string())
        });
        let nodes = lists.next().unwrap_or_default();
        snapshot.nodes = named(nodes, NODES, &mut snapshot.quarantined, |n: &Node| {
            n.check().map(|()| n.name.as_str()).map_err(|e| e.to_string())
        });
        for (key, v) in lists.next().unwrap_or_default() {
            let Some(name) = key.strip_prefix(ASSIGNMENTS) else {
                snapshot.quarantined.push((key, format!("the store listed it under `{ASSIGNMENTS}`")));
                continue;
            };
            if !canonical_key(name) {
                snapshot.quarantined.push((key, "the key is not `deployment/replica/stage`".to_owned()));
                continue;
            }
            match serde_json::from_str::<Assignment>(&v.value) {
                Ok(a) => {
                    snapshot.assignments.insert(name.to_owned(), (a, v.revision));
                }
                Err(e) => snapshot.quarantined.push((key, e.to_string())),
            }
        }
        Ok(snapshot)
    }

    /// A deployment's bindings by replica, then by stage.
    pub fn bindings(&self, deployment: &str) -> BTreeMap<u32, BTreeMap<usize, &Assignment>> {
        let mut out: BTreeMap<u32, BTreeMap<usize, &Assignment>> = BTreeMap::new();
        let prefix = format!("{deployment}/");
        for (key, (assignment, _)) in self.assignments.range(prefix.clone()..) {
            if !key.starts_with(&prefix) {
                break;
            }
            if let Some((name, replica, stage)) = parse_assignment_key(key)
                && name == deployment
            {
                out.entry(replica).or_default().insert(stage, assignment);
            }
        }
        out
    }

    /// Names of the deployments and nodes whose records are quarantined, and whether an
    /// assignment is.
    pub(crate) fn quarantine(&self) -> (BTreeSet<&str>, BTreeSet<&str>, bool) {
        let mut deployments = BTreeSet::new();
        let mut nodes = BTreeSet::new();
        let mut assignment = false;
        for (key, _) in &self.quarantined {
            if let Some(name) = key.strip_prefix(DEPLOYMENTS) {
                deployments.insert(name);
            } else if let Some(name) = key.strip_prefix(NODES) {
                nodes.insert(name);
            } else {
                assignment = true;
            }
        }
        (deployments, nodes, assignment)
    }
}

/// Records that carry their own name: decoded, checked (`check` returns the name) and kept
/// under their name when it matches their key; the others go to `quarantined` with why.
fn named<T: serde::de::DeserializeOwned>(
    records: Vec<(String, Versioned)>,
    prefix: &str,
    quarantined: &mut Vec<(String, String)>,
    check: impl Fn(&T) -> Result<&str, String>,
) -> BTreeMap<String, (T, u64)> {
    let mut out = BTreeMap::new();
    for (key, v) in records {
        let Some(name) = key.strip_prefix(prefix) else {
            // A store that lists keys outside the prefix asked for is broken; name the key.
            quarantined.push((key, format!("the store listed it under `{prefix}`")));
            continue;
        };
        let parsed = serde_json::from_str::<T>(&v.value).map_err(|e| e.to_string()).and_then(|record| {
            match check(&record)? {
                own if own == name => Ok(()),
                own => Err(format!("its name is `{own}`, not `{name}`")),
            }
            .map(|()| record)
        });
        match parsed {
            Ok(record) => {
                out.insert(name.to_owned(), (record, v.revision));
            }
            Err(why) => quarantined.push((key, why)),
        }
    }
    out
}

/// Whether `key` is exactly what [`assignment_key`](crate::assignment_key) writes: numbers without signs or
/// leading zeros, so no stage can be bound under two spellings.
fn canonical_key(key: &str) -> bool {
    let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    parse_assignment_key(key).is_some() && key.rsplitn(3, '/').take(2).all(number)
}
