//! etcd through its JSON gateway (`/v3/kv/range`, `/v3/kv/txn`, `/v3/lease/*`): the store
//! Kubernetes itself trusts, for fleets that run several controllers.
//!
//! Each commit is one etcd transaction whose compares are the ops' expectations (`Absent`
//! is `create_revision == 0`, `Revision(r)` is `mod_revision == r`), so etcd decides, not
//! the controller, whether a write still holds. A controller that leads also fences every
//! commit with its leader key's creation revision: once its lease lapses and the key is
//! gone, its writes fail even if it has not noticed yet.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use stageplan_reconcile::{Expect, Op, Store, StoreError, Versioned};

/// etcd's default `--max-txn-ops`.
const MAX_TXN_OPS: usize = 128;
/// Keys per range request: pages stay far under the response limit.
const PAGE: u64 = 2_000;
/// Largest response read (ureq's default is 10 MiB).
const RESPONSE_LIMIT: u64 = 256 << 20;

/// Leadership held through a lease: the lease id and the leader key's creation revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    pub id: String,
    pub lease: i64,
    pub create_revision: u64,
}

/// An etcd cluster as a [`Store`], under a key prefix.
#[derive(Debug)]
pub struct EtcdStore {
    agent: ureq::Agent,
    base: String,
    prefix: String,
    leader: Option<Leadership>,
    /// Led once and lost it: every commit fails until `try_lead` wins again, so a library
    /// user who keeps writing after losing the lease cannot write unfenced.
    deposed: bool,
}

fn b64(text: &str) -> String {
    BASE64.encode(text.as_bytes())
}

fn unb64(value: &Value) -> Result<String, StoreError> {
    let text = value.as_str().unwrap_or_default();
    let bytes = BASE64.decode(text).map_err(|e| StoreError::Unavailable(format!("etcd sent bad base64: {e}")))?;
    String::from_utf8(bytes).map_err(|e| StoreError::Unavailable(format!("etcd sent a non-UTF-8 value: {e}")))
}

/// etcd's gateway writes 64-bit integers as strings, and leaves out zeros.
fn int(value: &Value) -> i64 {
    match value {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// The smallest key after every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> String {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0xff {
            bytes.push(last + 1);
            return BASE64.encode(bytes);
        }
    }
    BASE64.encode([0])
}

impl EtcdStore {
    /// Connects to `host:port[/prefix]` (prefix default `stageplan`) and checks it answers.
    ///
    /// # Errors
    /// etcd does not answer.
    pub fn connect(spec: &str) -> Result<EtcdStore, StoreError> {
        let (address, prefix) = spec.split_once('/').unwrap_or((spec, "stageplan"));
        let config = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(5))).build();
        let store = EtcdStore {
            agent: config.into(),
            base: format!("http://{address}"),
            prefix: format!("/{}/", prefix.trim_matches('/')),
            leader: None,
            deposed: false,
        };
        store.call("/v3/maintenance/status", &json!({}))?;
        Ok(store)
    }

    fn call(&self, path: &str, body: &Value) -> Result<Value, StoreError> {
        let url = format!("{}{path}", self.base);
        let mut response = self
            .agent
            .post(&url)
            .send_json(body)
            .map_err(|e| StoreError::Unavailable(format!("etcd at {}: {e}", self.base)))?;
        response
            .body_mut()
            .with_config()
            .limit(RESPONSE_LIMIT)
            .read_json()
            .map_err(|e| StoreError::Unavailable(format!("etcd at {}: {e}", self.base)))
    }

    /// Every key under `full` (already prefixed) at `revision` (0: the latest), a page at a
    /// time; returns the records and the revision read.
    ///
    /// A reply is checked, not trusted: a key outside the range asked for, or a page that
    /// does not move past the last one (which would loop forever), is an error.
    fn range(&self, full: &str, revision: u64) -> Result<(Vec<(String, Versioned)>, u64), StoreError> {
        let end = prefix_end(full);
        let mut from = full.as_bytes().to_vec();
        let mut revision = revision;
        let mut out = Vec::new();
        let garbage = |what: String| StoreError::Unavailable(format!("etcd at {} sent {what}", self.base));
        loop {
            let request = json!({"key": BASE64.encode(&from), "range_end": end, "limit": PAGE, "revision": revision});
            let reply = self.call("/v3/kv/range", &request)?;
            if revision == 0 {
                revision = int(&reply["header"]["revision"]) as u64;
            }
            let kvs = reply["kvs"].as_array().map(Vec::as_slice).unwrap_or_default();
            for kv in kvs {
                let key = unb64(&kv["key"])?;
                if !key.starts_with(full) {
                    return Err(garbage(format!("key `{key}` for a range under `{full}`")));
                }
                let Some(key) = key.strip_prefix(&self.prefix) else { continue };
                let value = Versioned { value: unb64(&kv["value"])?, revision: int(&kv["mod_revision"]) as u64 };
                out.push((key.to_owned(), value));
            }
            match (reply["more"].as_bool(), kvs.last()) {
                (Some(true), Some(last)) => {
                    // The next page starts just after the last key: the key with a 0 byte added.
                    let mut after = unb64(&last["key"])?.into_bytes();
                    after.push(0);
                    if after <= from {
                        return Err(garbage("a page of keys that does not move past the last one".to_owned()));
                    }
                    from = after;
                }
                _ => return Ok((out, revision)),
            }
        }
    }

    fn leader_key(&self) -> String {
        format!("{}leader", self.prefix)
    }

    /// The leadership this store holds, if any.
    pub fn leadership(&self) -> Option<&Leadership> {
        self.leader.as_ref()
    }

    /// Tries once to lead as `id` with a lease of `ttl_s` seconds; renews if already leading.
    /// While it leads, every commit is fenced by the leader key.
    ///
    /// # Errors
    /// etcd does not answer.
    pub fn try_lead(&mut self, id: &str, ttl_s: i64) -> Result<bool, StoreError> {
        if self.leader.is_some() {
            return self.renew();
        }
        let grant = self.call("/v3/lease/grant", &json!({"TTL": ttl_s}))?;
        let lease = int(&grant["ID"]);
        if lease == 0 {
            // A put with lease 0 would never expire: better no leader than an immortal one.
            return Err(StoreError::Unavailable(format!("etcd granted no lease: {grant}")));
        }
        let key = b64(&self.leader_key());
        let txn = json!({
            "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": 0}],
            "success": [{"request_put": {"key": key, "value": b64(id), "lease": lease}}],
        });
        let reply = self.call("/v3/kv/txn", &txn)?;
        if reply["succeeded"].as_bool() == Some(true) {
            let create_revision = int(&reply["header"]["revision"]) as u64;
            self.leader = Some(Leadership { id: id.to_owned(), lease, create_revision });
            self.deposed = false;
            return Ok(true);
        }
        self.call("/v3/lease/revoke", &json!({"ID": lease}))?;
        Ok(false)
    }

    /// Keeps the lease alive; false (and no longer leading) once it has lapsed.
    ///
    /// # Errors
    /// etcd does not answer.
    pub fn renew(&mut self) -> Result<bool, StoreError> {
        let Some(leader) = self.leader.clone() else { return Ok(false) };
        let reply = self.call("/v3/lease/keepalive", &json!({"ID": leader.lease}))?;
        let alive = int(&reply["result"]["TTL"]) > 0;
        let range = self.call("/v3/kv/range", &json!({"key": b64(&self.leader_key())}))?;
        let ours = range["kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .is_some_and(|kv| int(&kv["create_revision"]) as u64 == leader.create_revision);
        if !(alive && ours) {
            self.leader = None;
            self.deposed = true;
        }
        Ok(self.leader.is_some())
    }

    /// Gives leadership up at once (revokes the lease, which deletes the leader key).
    ///
    /// # Errors
    /// etcd does not answer.
    pub fn resign(&mut self) -> Result<(), StoreError> {
        if let Some(leader) = self.leader.take() {
            self.deposed = true;
            self.call("/v3/lease/revoke", &json!({"ID": leader.lease}))?;
        }
        Ok(())
    }

    /// Forgets leadership without telling etcd: what a crashed controller leaves behind.
    pub fn abandon(&mut self) {
        self.leader = None;
        self.deposed = true;
    }

    /// Who leads now, by id.
    ///
    /// # Errors
    /// etcd does not answer.
    pub fn leader_id(&self) -> Result<Option<String>, StoreError> {
        let range = self.call("/v3/kv/range", &json!({"key": b64(&self.leader_key())}))?;
        range["kvs"].as_array().and_then(|kvs| kvs.first()).map(|kv| unb64(&kv["value"])).transpose()
    }
}

impl Store for EtcdStore {
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        Ok(self.range(&format!("{}{prefix}", self.prefix), 0)?.0)
    }

    fn list_many(&mut self, prefixes: &[&str]) -> Result<Vec<Vec<(String, Versioned)>>, StoreError> {
        // Every prefix at the first read's revision: one consistent snapshot.
        let mut revision = 0;
        let mut out = Vec::with_capacity(prefixes.len());
        for prefix in prefixes {
            let (records, read_at) = self.range(&format!("{}{prefix}", self.prefix), revision)?;
            revision = read_at;
            out.push(records);
        }
        Ok(out)
    }

    fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError> {
        if self.deposed {
            return Err(StoreError::Conflict {
                key: "leader (this controller no longer leads; win `try_lead` first)".to_owned(),
            });
        }
        let mut compare = Vec::new();
        let mut success = Vec::new();
        for op in ops {
            let key = b64(&format!("{}{}", self.prefix, op.key()));
            match op.expect() {
                Expect::Any => {}
                Expect::Absent => {
                    compare.push(json!({"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": 0}));
                }
                Expect::Revision(r) => {
                    compare.push(json!({"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": r}));
                }
            }
            success.push(match op {
                Op::Put { value, .. } => json!({"request_put": {"key": key, "value": b64(value)}}),
                Op::Delete { .. } => json!({"request_delete_range": {"key": key}}),
            });
        }
        if let Some(leader) = &self.leader {
            let key = b64(&self.leader_key());
            compare.push(
                json!({"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": leader.create_revision}),
            );
        }
        let reply = self.call("/v3/kv/txn", &json!({"compare": compare, "success": success}))?;
        if reply["succeeded"].as_bool() == Some(true) {
            return Ok(int(&reply["header"]["revision"]) as u64);
        }
        // etcd does not say which compare failed; name the first op that had one.
        let key = ops
            .iter()
            .find(|op| op.expect() != Expect::Any)
            .map_or_else(|| "leader".to_owned(), |op| op.key().to_owned());
        if self.leader.is_some() && !self.renew()? {
            return Err(StoreError::Conflict { key: "leader (this controller no longer leads)".to_owned() });
        }
        Err(StoreError::Conflict { key })
    }

    fn max_ops(&self) -> usize {
        // One compare slot is the leader fence.
        MAX_TXN_OPS - 1
    }
}
