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
    /// etcd's user and password, with authentication on.
    user: Option<(String, String)>,
    /// The token etcd gave for `user`; asked again when it expires.
    token: std::sync::Mutex<Option<String>>,
    /// Over TLS, with or without a client certificate: what a failed handshake's hint says.
    tls: Option<bool>,
}

/// How to reach etcd beyond its address: over TLS, and as a user when etcd's
/// authentication is on.
#[derive(Clone, Debug, Default)]
pub struct EtcdOptions {
    /// `https`, with these certificates.
    pub tls: Option<Tls>,
    /// A user of etcd's and its password.
    pub user: Option<(String, String)>,
}

/// TLS to etcd: the certificate authority that signed etcd's certificate (PEM; `None`:
/// Mozilla's roots), and this client's certificate and key (PEM) for etcd's
/// `--client-cert-auth`.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    pub ca: Option<Vec<u8>>,
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    fn config(&self) -> Result<ureq::tls::TlsConfig, StoreError> {
        use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};
        let bad = |what: &str, e: ureq::Error| StoreError::Unavailable(format!("{what} is not PEM: {e}"));
        let mut config = TlsConfig::builder();
        if let Some(ca) = &self.ca {
            let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(ca)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                })
                .collect::<Result<_, _>>()
                .map_err(|e| bad("the etcd CA", e))?;
            if certs.is_empty() {
                return Err(StoreError::Unavailable("the etcd CA file holds no certificate".to_owned()));
            }
            config = config.root_certs(RootCerts::new_with_certs(&certs));
        }
        if let Some((cert, key)) = &self.client {
            let chain = [Certificate::from_pem(cert).map_err(|e| bad("the client certificate", e))?];
            let key = PrivateKey::from_pem(key).map_err(|e| bad("the client key", e))?;
            config = config.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        Ok(config.build())
    }
}

/// Why a request to etcd failed: no answer, or an answer other than 200 with etcd's message.
#[derive(Debug)]
enum Refusal {
    Transport(String),
    Status(u16, String),
}

impl Refusal {
    /// Authentication is on and no user was given: etcd says the user name is empty (400),
    /// or that a token it does not know is invalid (401).
    fn wants_a_user(&self) -> bool {
        matches!(self, Refusal::Status(400 | 401, message)
            if message.contains("user name is empty") || message.contains("auth token"))
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Transport(e) => f.write_str(e),
            Refusal::Status(status, message) => {
                write!(f, "answered {status}: {}", stageplan::quote::line(message))
            }
        }
    }
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
    /// Connects to `host:port[/prefix]` (prefix default `stageplan`) over plain HTTP and
    /// checks it answers.
    ///
    /// # Errors
    /// etcd does not answer.
    pub fn connect(spec: &str) -> Result<EtcdStore, StoreError> {
        EtcdStore::connect_with(spec, &EtcdOptions::default())
    }

    /// Connects to `host:port[/prefix]` as `options` say (TLS, a user), authenticates, and
    /// checks it answers.
    ///
    /// # Errors
    /// etcd does not answer, refuses the user, or the certificates do not read.
    pub fn connect_with(spec: &str, options: &EtcdOptions) -> Result<EtcdStore, StoreError> {
        let (address, prefix) = spec.split_once('/').unwrap_or((spec, "stageplan"));
        // Statuses other than 200 are read, for etcd's message.
        let mut config =
            ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(5))).http_status_as_error(false);
        if let Some(tls) = &options.tls {
            config = config.tls_config(tls.config()?);
        }
        let scheme = if options.tls.is_some() { "https" } else { "http" };
        let store = EtcdStore {
            agent: config.build().into(),
            base: format!("{scheme}://{address}"),
            prefix: format!("/{}/", prefix.trim_matches('/')),
            leader: None,
            deposed: false,
            user: options.user.clone(),
            token: std::sync::Mutex::new(None),
            tls: options.tls.as_ref().map(|t| t.client.is_some()),
        };
        if store.user.is_some() {
            store.authenticate()?;
        }
        store.call("/v3/maintenance/status", &json!({}))?;
        // A status needs no user, a read does: without one, say so here, with the fix.
        if store.user.is_none() {
            let read = store.post("/v3/kv/range", &json!({"key": b64(&store.leader_key()), "limit": 1}), None);
            if let Err(refusal) = read
                && refusal.wants_a_user()
            {
                return Err(store.refused(&refusal));
            }
        }
        Ok(store)
    }

    /// Adds `user` with the `root` role and turns etcd's authentication on (tests).
    ///
    /// # Errors
    /// etcd refuses.
    #[cfg(feature = "testing")]
    pub fn enable_auth(&self, user: &str, password: &str) -> Result<(), StoreError> {
        self.call("/v3/auth/user/add", &json!({"name": user, "password": password}))?;
        self.call("/v3/auth/user/grant", &json!({"user": user, "role": "root"}))?;
        self.call("/v3/auth/enable", &json!({}))?;
        Ok(())
    }

    /// Asks etcd for a token as the store's user.
    fn authenticate(&self) -> Result<(), StoreError> {
        let Some((name, password)) = &self.user else { return Ok(()) };
        let reply = self.post("/v3/auth/authenticate", &json!({"name": name, "password": password}), None).map_err(
            |refusal| match refusal {
                Refusal::Status(_, message) => StoreError::Unavailable(format!(
                    "etcd at {} refused user `{}` ({}): check the user and STAGEPLAN_ETCD_PASSWORD",
                    self.base,
                    stageplan::quote::line(name),
                    stageplan::quote::line(&message)
                )),
                refusal => StoreError::Unavailable(format!("etcd at {}: {refusal}{}", self.base, self.hint(&refusal))),
            },
        )?;
        let token = reply["token"]
            .as_str()
            .ok_or_else(|| StoreError::Unavailable(format!("etcd at {} gave no token", self.base)))?;
        *self.token.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(token.to_owned());
        Ok(())
    }

    /// One request: its JSON answer, or the HTTP status and etcd's message.
    fn post(&self, path: &str, body: &Value, token: Option<&str>) -> Result<Value, Refusal> {
        let mut request = self.agent.post(format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.header("Authorization", token);
        }
        let mut response = request.send_json(body).map_err(|e| Refusal::Transport(e.to_string()))?;
        let status = response.status().as_u16();
        if status == 200 {
            return response
                .body_mut()
                .with_config()
                .limit(RESPONSE_LIMIT)
                .read_json()
                .map_err(|e| Refusal::Transport(e.to_string()));
        }
        // etcd's message: `error` or `message` of a JSON answer, or its text.
        let text = response.body_mut().with_config().limit(4096).read_to_string().unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().or(v["message"].as_str()).map(str::to_owned))
            .unwrap_or_else(|| text.trim().to_owned());
        Err(Refusal::Status(status, message))
    }

    fn call(&self, path: &str, body: &Value) -> Result<Value, StoreError> {
        let token = || self.token.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let answer = match self.post(path, body, token().as_deref()) {
            // A token expires (etcd's `--auth-token-ttl`): ask for a new one, once.
            Err(Refusal::Status(401, _)) if self.user.is_some() => {
                self.authenticate()?;
                self.post(path, body, token().as_deref())
            }
            answer => answer,
        };
        answer.map_err(|refusal| self.refused(&refusal))
    }

    /// A refusal as the store's error, with what to give where that is known.
    fn refused(&self, refusal: &Refusal) -> StoreError {
        if self.user.is_none() && refusal.wants_a_user() {
            let scheme = if self.tls.is_some() { "etcds" } else { "etcd" };
            return StoreError::Unavailable(format!(
                "etcd at {} requires a user: give it as `{scheme}://USER@HOST:PORT` with its password in STAGEPLAN_ETCD_PASSWORD",
                self.base
            ));
        }
        StoreError::Unavailable(format!("etcd at {}: {refusal}{}", self.base, self.hint(refusal)))
    }

    /// What to give when a TLS connection fails: the CA for a certificate not trusted, a
    /// client certificate when etcd closes the connection on a client without one.
    fn hint(&self, refusal: &Refusal) -> &'static str {
        let Refusal::Transport(error) = refusal else { return "" };
        match self.tls {
            Some(_) if error.contains("UnknownIssuer") || error.contains("invalid peer certificate") => {
                "; give the CA that signed etcd's certificate in STAGEPLAN_ETCD_CA (a PEM file)"
            }
            Some(false) => {
                "; if etcd asks for client certificates, give one in STAGEPLAN_ETCD_CERT and its key in STAGEPLAN_ETCD_KEY"
            }
            _ => "",
        }
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
