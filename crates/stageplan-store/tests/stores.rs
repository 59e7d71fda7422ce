//! Every store keeps the core's contract, the loop runs on each, and two controllers on one
//! real etcd server never double-bind; killing the leader hands over within the lease.
//!
//! The etcd tests start Debian's `etcd` (package `etcd-server`) on 127.0.0.1 with a
//! temporary data dir; `cargo xtask test` installs it.

// The measured race and handover are worth reading in the test log.
#![allow(clippy::print_stderr)]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use stageplan_reconcile::{
    Controller, Deployment, Event, Expect, MemoryStore, NoMetrics, Node, Op, Placement, Snapshot, StageRequest, Store,
    StoreError, check_invariants,
};
use stageplan_store::testing::{EtcdServer, temp_dir};
use stageplan_store::{EtcdStore, RedbStore};

const GIB: u64 = 1 << 30;

fn put(key: &str, value: &str, expect: Expect) -> Op {
    Op::Put { key: key.into(), value: value.into(), expect }
}

/// The contract every store keeps: all-or-nothing commits, one revision per commit, prefix
/// listing in key order.
fn contract(store: &mut impl Store) {
    let r1 = store.commit(&[put("nodes/a", "1", Expect::Absent), put("nodes/b", "2", Expect::Absent)]).unwrap();
    let listed = store.list("nodes/").unwrap();
    assert_eq!(
        listed.iter().map(|(k, v)| (k.as_str(), v.value.as_str(), v.revision)).collect::<Vec<_>>(),
        [("nodes/a", "1", r1), ("nodes/b", "2", r1)]
    );
    let conflict = store.commit(&[put("nodes/c", "3", Expect::Absent), put("nodes/a", "x", Expect::Absent)]);
    assert!(matches!(conflict, Err(StoreError::Conflict { .. })), "{conflict:?}");
    assert_eq!(store.list("nodes/").unwrap().len(), 2, "a failed commit writes nothing");
    let r2 = store.commit(&[put("nodes/a", "1b", Expect::Revision(r1))]).unwrap();
    assert!(r2 > r1);
    assert!(matches!(store.commit(&[put("nodes/a", "1c", Expect::Revision(r1))]), Err(StoreError::Conflict { .. })));
    store.commit(&[Op::Delete { key: "nodes/a".into(), expect: Expect::Revision(r2) }]).unwrap();
    store.commit(&[put("assignments/d/0/0", "{}", Expect::Any)]).unwrap();
    assert_eq!(store.list("nodes/").unwrap().len(), 1);
    assert_eq!(store.list("").unwrap().len(), 2);
    store
        .commit(&[
            Op::Delete { key: "nodes/b".into(), expect: Expect::Any },
            Op::Delete { key: "assignments/d/0/0".into(), expect: Expect::Any },
        ])
        .unwrap();
    assert!(store.list("").unwrap().is_empty());
}

fn gpu_node(name: &str, gpus: u32) -> Node {
    Node { name: name.into(), memory: 80 * GIB * u64::from(gpus), gpus }
}

fn deployment(name: &str, replicas: u32) -> Deployment {
    Deployment {
        name: name.into(),
        model: "llama-3.1-70b q4_k_m".into(),
        replicas,
        min_replicas: None,
        max_replicas: None,
        placement: Placement::BinPack,
        stages: vec![
            StageRequest { layers: [0, 40], memory: 20 * GIB, gpus: 1, node: None, gpu_ids: Vec::new() },
            StageRequest { layers: [40, 80], memory: 20 * GIB, gpus: 1, node: None, gpu_ids: Vec::new() },
        ],
        autoscale: None,
        last_scaled_ms: None,
        planned: None,
    }
}

/// The loop on a store: everything placed, then quiet.
fn loop_settles(store: &mut impl Store) {
    let mut controller = Controller::default();
    for n in 0..4 {
        controller.handle(store, Event::NodeJoined(gpu_node(&format!("n{n}"), 4)), &NoMetrics).unwrap();
    }
    controller.handle(store, Event::DeploymentChanged(deployment("llama", 6)), &NoMetrics).unwrap();
    let first = controller.pass(store, 0, &NoMetrics).unwrap();
    assert_eq!((first.scheduled.len(), first.pending.len()), (12, 0));
    assert!(controller.pass(store, 1, &NoMetrics).unwrap().is_quiet());
    check_invariants(&Snapshot::load(store).unwrap()).unwrap();
}

#[test]
fn memory_store_keeps_the_contract() {
    contract(&mut MemoryStore::new());
    loop_settles(&mut MemoryStore::new());
}

#[test]
fn redb_keeps_the_contract_and_everything_survives_reopening() {
    let dir = temp_dir("redb");
    let path = dir.join("state.redb");
    contract(&mut RedbStore::open(&path).unwrap());
    loop_settles(&mut RedbStore::open(&path).unwrap());
    let before = {
        let mut store = RedbStore::open(&path).unwrap();
        Snapshot::load(&mut store).unwrap().assignments
    };
    // A new process: the bindings, revisions and capacity come back from the file.
    let mut store = RedbStore::open(&path).unwrap();
    assert_eq!(Snapshot::load(&mut store).unwrap().assignments, before);
    assert!(Controller::default().pass(&mut store, 2, &NoMetrics).unwrap().is_quiet());
    // One process at a time: a second open names the problem.
    let second = RedbStore::open(&path).unwrap_err().to_string();
    assert!(second.contains("another `stageplan`"), "{second}");
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn etcd_keeps_the_contract_and_runs_the_loop() {
    let etcd = EtcdServer::start();
    contract(&mut etcd.store());
    loop_settles(&mut etcd.store());
}

/// etcd over TLS with client certificates and authentication on: the store keeps the
/// contract as the test user, and each missing piece is refused with what to give.
#[test]
fn etcd_over_tls_with_a_user_keeps_the_contract_and_refuses_what_is_missing() {
    use stageplan_store::testing::ETCD_USER;
    let etcd = EtcdServer::start_secure();
    let mut store = etcd.store();
    contract(&mut store);
    loop_settles(&mut etcd.store());

    let refused = |options: &stageplan_store::EtcdOptions| {
        EtcdStore::connect_with(etcd.address(), options).map(|_| ()).unwrap_err().to_string()
    };
    let no_user = refused(&etcd.options(None));
    assert!(no_user.contains("requires a user: give it as `etcds://USER@HOST:PORT`"), "{no_user}");
    let wrong = refused(&etcd.options(Some((ETCD_USER.0, "not-the-password"))));
    assert!(wrong.contains("refused user `root`"), "{wrong}");
    let mut no_client_cert = etcd.options(Some(ETCD_USER));
    no_client_cert.tls.as_mut().unwrap().client = None;
    let without = refused(&no_client_cert);
    assert!(without.contains("STAGEPLAN_ETCD_CERT"), "{without}");
    let mut unknown_ca = etcd.options(Some(ETCD_USER));
    unknown_ca.tls.as_mut().unwrap().ca = None;
    let untrusted = refused(&unknown_ca);
    assert!(untrusted.contains("STAGEPLAN_ETCD_CA"), "{untrusted}");
    eprintln!("refused:\n  {no_user}\n  {wrong}\n  {without}\n  {untrusted}");
    // Plain HTTP to a TLS-only etcd does not pass for a store either.
    assert!(EtcdStore::connect(etcd.address()).is_err());
}

/// A controller whose first pass lacks one deployment (as if it read just before that
/// deployment was created), and waits after that first read until the other controller has
/// read too: both then decide on the same free GPUs, for different replicas.
struct Racing {
    store: EtcdStore,
    hide: &'static str,
    barrier: Option<Arc<Barrier>>,
    lists: usize,
}

impl Store for Racing {
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, stageplan_reconcile::Versioned)>, StoreError> {
        let mut records = self.store.list(prefix)?;
        if self.lists < 3 {
            records.retain(|(k, _)| k != self.hide);
        }
        self.lists += 1;
        // A pass reads deployments, nodes, assignments: meet after the third read.
        if self.lists == 3
            && let Some(barrier) = self.barrier.take()
        {
            barrier.wait();
        }
        Ok(records)
    }

    fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError> {
        self.store.commit(ops)
    }
}

/// Two controllers pass concurrently against one etcd without leadership (the worst case),
/// each binding different replicas onto the same free GPUs: compare-and-swap on the nodes'
/// records must reject whichever commits second.
#[test]
fn two_controllers_on_one_etcd_never_double_bind() {
    let etcd = EtcdServer::start();
    let mut setup = etcd.store();
    let mut controller = Controller::default();
    for n in 0..6 {
        controller.handle(&mut setup, Event::NodeJoined(gpu_node(&format!("n{n}"), 2)), &NoMetrics).unwrap();
    }
    // 12 GPUs; 24 stages wanted in each of two deployments.
    for name in ["alpha", "beta"] {
        controller.handle(&mut setup, Event::DeploymentChanged(deployment(name, 12)), &NoMetrics).unwrap();
    }
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = ["deployments/alpha", "deployments/beta"]
        .into_iter()
        .map(|hide| {
            let (barrier, address) = (barrier.clone(), etcd.address().to_owned());
            std::thread::spawn(move || {
                let store = EtcdStore::connect(&address).unwrap();
                let mut racing = Racing { store, hide, barrier: Some(barrier), lists: 0 };
                let mut controller = Controller::default();
                let (mut scheduled, mut conflicts) = (0, 0);
                for now in 0..20 {
                    match controller.pass(&mut racing, now * 1_000_000, &NoMetrics) {
                        Ok(report) => scheduled += report.scheduled.len(),
                        Err(StoreError::Conflict { .. }) => conflicts += 1,
                        Err(e) => panic!("{e}"),
                    }
                    check_invariants(&Snapshot::load(&mut racing.store).unwrap()).unwrap();
                }
                (scheduled, conflicts)
            })
        })
        .collect();
    let results: Vec<(usize, usize)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    eprintln!("(scheduled, conflicts) per controller: {results:?}");
    let snapshot = Snapshot::load(&mut setup).unwrap();
    check_invariants(&snapshot).unwrap();
    assert_eq!(snapshot.assignments.len(), 12, "every GPU bound once: {results:?}");
    assert_eq!(results.iter().map(|r| r.0).sum::<usize>(), 12, "each binding reported by exactly one controller");
    assert!(results.iter().any(|r| r.1 > 0), "the race happened: one controller was refused");
}

/// The leader stops renewing (a crash); the follower takes over once the lease lapses, and
/// the old leader's writes are fenced off.
#[test]
fn killing_the_leader_hands_over_within_the_lease() {
    let etcd = EtcdServer::start();
    const TTL_S: i64 = 2;
    let mut a = etcd.store();
    let mut b = etcd.store();
    assert!(a.try_lead("a", TTL_S).unwrap());
    assert!(!b.try_lead("b", TTL_S).unwrap());
    assert_eq!(a.leader_id().unwrap().as_deref(), Some("a"));
    // While `a` renews, `b` stays a follower.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(700));
        assert!(a.try_lead("a", TTL_S).unwrap());
        assert!(!b.try_lead("b", TTL_S).unwrap());
    }
    // `a` dies without resigning. Its stale handle keeps the fence it had.
    let fenced_a = a;
    let died = Instant::now();
    while !b.try_lead("b", TTL_S).unwrap() {
        // A deadline for a lease that never expires, not a speed limit: it holds on any machine.
        assert!(died.elapsed() < Duration::from_secs(TTL_S as u64 * 10), "no handover after {:?}", died.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let handover = died.elapsed();
    eprintln!("handover after {handover:?} (lease {TTL_S} s)");
    let mut fenced_a = fenced_a;
    let write = fenced_a.commit(&[put("nodes/x", "{}", Expect::Any)]);
    assert!(matches!(write, Err(StoreError::Conflict { .. })), "a deposed leader must not write: {write:?}");
    let again = fenced_a.commit(&[put("nodes/y", "{}", Expect::Any)]);
    assert!(matches!(again, Err(StoreError::Conflict { .. })), "nor on its second try: {again:?}");
    b.commit(&[put("nodes/x", "{}", Expect::Any)]).unwrap();
    b.resign().unwrap();
    let mut c = etcd.store();
    assert!(c.try_lead("c", TTL_S).unwrap(), "resigning hands over at once");
}

/// The records of a store, for comparing.
fn records(store: &mut impl Store) -> Result<Vec<(String, stageplan_reconcile::Versioned)>, StoreError> {
    store.list("")
}

/// A redb file damaged anywhere — a flipped byte at the start, the second byte, the middle or
/// the end of every page, every eighth byte of the header, or cut short at every 512 bytes — is
/// read by `status` (a read-only open and every record) and by the loop (a writable open and
/// one pass) as either exactly the records written or [`StoreError::Corrupt`]: never a panic,
/// a hang, another error or a record read wrong. A read-only open never changes the file.
#[test]
fn a_damaged_redb_file_is_reported_as_corrupt_never_a_panic() {
    let dir = temp_dir("damaged");
    let path = dir.join("state.redb");
    {
        let mut store = RedbStore::open(&path).unwrap();
        let mut controller = Controller::default();
        for n in 0..3 {
            controller.handle(&mut store, Event::NodeJoined(gpu_node(&format!("n{n}"), 4)), &NoMetrics).unwrap();
        }
        controller.handle(&mut store, Event::DeploymentChanged(deployment("llama", 3)), &NoMetrics).unwrap();
        controller.handle(&mut store, Event::DeploymentChanged(deployment("small", 2)), &NoMetrics).unwrap();
        let report = controller.pass(&mut store, 0, &NoMetrics).unwrap();
        assert_eq!(report.scheduled.len(), 10, "{report:?}");
    }
    let original = std::fs::read(&path).unwrap();
    let written = records(&mut RedbStore::open_read_only(&path).unwrap()).unwrap();
    assert_eq!(written.len(), 3 + 2 + 10);
    const PAGE: usize = 4096;
    let mut damages: Vec<(String, Vec<u8>)> = Vec::new();
    for page in 0..original.len().div_ceil(PAGE) {
        for offset in [0, 1, PAGE / 2, PAGE - 1] {
            damages.extend((page * PAGE + offset < original.len()).then(|| flipped(&original, page * PAGE + offset)));
        }
    }
    damages.extend((0..1024).step_by(8).map(|at| flipped(&original, at)));
    damages.extend((512..original.len()).step_by(512).map(|at| (format!("cut at {at}"), original[..at].to_vec())));

    // Each case runs on a worker; a case that takes more than 30 s is a hang.
    let (done, finished) = std::sync::mpsc::channel();
    let copies = dir.clone();
    let cases = damages.len();
    let worker = std::thread::spawn(move || {
        let mut corrupt = 0;
        for (i, (damage, bytes)) in damages.into_iter().enumerate() {
            let copy = copies.join(format!("damaged-{i}.redb"));
            std::fs::write(&copy, &bytes).unwrap();
            let read = RedbStore::open_read_only(&copy).and_then(|mut store| {
                Snapshot::load(&mut store)?;
                records(&mut store)
            });
            match read {
                Ok(read) => assert!(read == written, "{damage}: read records that were never written: {read:?}"),
                Err(StoreError::Corrupt { problem, .. }) => {
                    assert!(!damage.starts_with("cut") || problem.contains("truncated"), "{damage}: {problem}");
                    corrupt += 1;
                }
                Err(e) => panic!("{damage}: `status` got {e:?}, not `Corrupt`"),
            }
            assert!(std::fs::read(&copy).unwrap() == bytes, "{damage}: a read-only open changed the file");
            let pass =
                RedbStore::open(&copy).and_then(|mut store| Controller::default().pass(&mut store, 1, &NoMetrics));
            assert!(matches!(pass, Ok(_) | Err(StoreError::Corrupt { .. })), "{damage}: a pass got {pass:?}");
            let _ = std::fs::remove_file(&copy);
            done.send(()).unwrap();
        }
        corrupt
    });
    for case in 0..cases {
        finished.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("case {case} of {cases} hangs"));
    }
    let corrupt = worker.join().unwrap();
    eprintln!("{cases} damaged files: {corrupt} reported corrupt, the others read exactly as written");
    assert!(corrupt > cases / 4, "the damage was noticed: {corrupt} of {cases}");
    let _ = std::fs::remove_dir_all(dir);
}

fn flipped(original: &[u8], at: usize) -> (String, Vec<u8>) {
    let mut bytes = original.to_vec();
    bytes[at] ^= 0xff;
    (format!("byte {at} flipped"), bytes)
}

/// Reading (what `status` does) never creates, initialises or writes a store, works on a
/// read-only file in a read-only directory, and names a file another process holds at once.
#[test]
fn reading_never_creates_or_writes_a_store() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("read-only");
    let missing = dir.join("missing.redb");
    assert!(matches!(RedbStore::open_read_only(&missing), Err(StoreError::Unavailable(_))));
    assert!(!missing.exists(), "reading created the file");

    let empty = dir.join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    let error = RedbStore::open_read_only(&empty).unwrap_err();
    assert!(matches!(&error, StoreError::Corrupt { problem, .. } if problem.contains("empty")), "{error:?}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0, "reading wrote a database into an empty file");

    let path = dir.join("state.redb");
    let mut writer = RedbStore::open(&path).unwrap();
    writer.commit(&[put("nodes/a", "{}", Expect::Absent)]).unwrap();
    // Refused as locked, at once: the store never waits; waiting is its caller's choice.
    let held = RedbStore::open_read_only(&path).unwrap_err();
    assert!(matches!(held, StoreError::Locked { .. }), "{held:?}");
    drop(writer);

    let bytes = std::fs::read(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let mut reader = RedbStore::open_read_only(&path).unwrap();
    assert_eq!(reader.list("").unwrap().len(), 1);
    let refused = reader.commit(&[put("nodes/b", "{}", Expect::Absent)]);
    assert!(matches!(refused, Err(StoreError::Unavailable(_))), "{refused:?}");
    drop(reader);
    assert!(std::fs::read(&path).unwrap() == bytes, "reading changed the file");
    // Writing needs permission (privileged users, like root in CI containers, have it anyway).
    if std::fs::OpenOptions::new().write(true).open(&path).is_err() {
        let denied = RedbStore::open(&path).unwrap_err();
        assert!(denied.to_string().contains("permission denied"), "{denied}");
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// A stand-in for etcd's gateway that answers every request with `reply(path)`: what a
/// broken proxy or a hostile server could send.
fn fake_etcd(reply: impl Fn(&str) -> String + Send + 'static) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let Ok(clone) = stream.try_clone() else { continue };
            let mut reader = BufReader::new(clone);
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            let path = request.split(' ').nth(1).unwrap_or_default().to_owned();
            let mut length = 0;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
                if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let _ = reader.read_exact(&mut vec![0; length]);
            let body = reply(&path);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    address
}

/// Garbage from etcd is an error or a quarantined record, never a panic or an endless read.
#[test]
fn garbage_from_etcd_is_an_error_not_a_panic_or_a_hang() {
    use base64::Engine;
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let kv = |key: &str, value: &str| {
        format!(r#"{{"key": "{}", "value": "{}", "mod_revision": "7"}}"#, b64(key), b64(value))
    };
    let node = r#"{"name": "a", "memory": 1000, "gpus": 1}"#;
    let cases: Vec<(&str, String)> = vec![
        ("not JSON", "garbage".to_owned()),
        ("a key outside the range", format!(r#"{{"kvs": [{}]}}"#, kv("/stageplan/x", "{}"))),
        ("a key outside the store", format!(r#"{{"kvs": [{}]}}"#, kv("/elsewhere/nodes/a", node))),
        ("bad base64", r#"{"kvs": [{"key": "%%%", "value": "%%%"}]}"#.to_owned()),
        ("the same page forever", format!(r#"{{"kvs": [{}], "more": true}}"#, kv("/stageplan/nodes/a", node))),
        ("a record that is not one", format!(r#"{{"kvs": [{}]}}"#, kv("/stageplan/nodes/a", "[1, 2"))),
        ("odd types", r#"{"header": {"revision": "-1"}, "kvs": {"a": 1}, "more": "yes"}"#.to_owned()),
    ];
    for (case, range) in cases {
        let address = fake_etcd(move |path| if path == "/v3/kv/range" { range.clone() } else { "{}".to_owned() });
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut store = EtcdStore::connect(&address).unwrap();
            let load = Snapshot::load(&mut store).map(|s| s.quarantined.len());
            let pass = Controller::default().pass(&mut store, 0, &NoMetrics).map(|r| r.quarantined.len());
            let _ = done.send((load, pass));
        });
        let (load, pass) = finished
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{case}: the read panicked or did not end"));
        for result in [load, pass] {
            assert!(matches!(result, Ok(_) | Err(StoreError::Unavailable(_))), "{case}: {result:?}");
        }
    }
}
