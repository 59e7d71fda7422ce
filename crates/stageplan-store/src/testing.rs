//! Test support: a real etcd server (and a real Prometheus) on 127.0.0.1 for one test,
//! temporary directories, and a small cluster's records. Used by this crate's tests, the
//! CLI's and the fuzz target.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stageplan_reconcile::{Controller, Deployment, Event, NoMetrics, Node, StageRequest, Store, StoreError};

use crate::EtcdStore;

/// Fills `store` as a small cluster would: three GPU nodes and a Mac, a two-stage GPU
/// deployment and a RAM one, and one pass's bindings (15 records). The seed of the store
/// fuzz target, and something to try `stageplan status` on (`examples/sample_store.rs`).
///
/// # Errors
/// The store failed.
pub fn fill_sample(store: &mut impl Store) -> Result<(), StoreError> {
    const GIB: u64 = 1 << 30;
    let mut controller = Controller::default();
    for (name, gib, gpus) in [("gpu-a", 640, 8), ("gpu-b", 320, 4), ("gpu-c", 320, 4), ("mac", 192, 0)] {
        let node = Node { name: name.into(), memory: gib * GIB, gpus };
        controller.handle(store, Event::NodeJoined(node), &NoMetrics)?;
    }
    let stage = |layers: [usize; 2], gib: u64, gpus: u32| StageRequest {
        layers,
        memory: gib * GIB,
        gpus,
        node: None,
        gpu_ids: Vec::new(),
    };
    // A stage pinned to two GPUs of a machine, as a tensor-parallel group's is.
    let pinned = StageRequest { node: Some("gpu-b".into()), gpu_ids: vec![2, 3], ..stage([0, 32], 16, 2) };
    let deployments = [
        ("llama-70b", 3, vec![stage([0, 40], 40, 1), stage([40, 80], 40, 1)]),
        ("embed", 2, vec![stage([0, 24], 8, 0)]),
        ("group", 1, vec![pinned]),
    ];
    for (name, replicas, stages) in deployments {
        let deployment = Deployment::new(name, replicas, stages);
        controller.handle(store, Event::DeploymentChanged(deployment), &NoMetrics)?;
    }
    controller.pass(store, 0, &NoMetrics)?;
    Ok(())
}

/// A fresh directory under the system's temporary directory.
///
/// # Panics
/// When it cannot be created.
pub fn temp_dir(name: &str) -> PathBuf {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("stageplan-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// Debian's `etcd` (package `etcd-server`) with a temporary data dir, killed when dropped.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    address: String,
    dir: PathBuf,
    /// Over TLS: the folder of its certificates (`ca.pem`, `client.pem`, `client-key.pem`).
    tls: Option<PathBuf>,
}

/// Debian's `etcd` with its data in `dir`, serving clients at `scheme://address` and its one
/// peer on `peer`, with `extra` arguments; what it says goes to `dir/etcd.log`.
fn spawn_etcd(dir: &std::path::Path, scheme: &str, address: &str, peer: u16, extra: &[std::ffi::OsString]) -> Child {
    let log = std::fs::File::create(dir.join("etcd.log")).expect("the temporary folder is writable");
    Command::new("etcd")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &format!("{scheme}://{address}")])
        .args(["--advertise-client-urls", &format!("{scheme}://{address}")])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args(["--initial-cluster", &format!("default=http://127.0.0.1:{peer}")])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("`etcd` runs: install Debian's etcd-server (cargo xtask test does)")
}

/// How long etcd may take to answer: a loaded 2-core CI machine runs the other tests'
/// etcds and engines beside it.
const ETCD_START: Duration = Duration::from_secs(60);

/// Starts etcd on fresh ports until one answers `connect`, trying again when it exits
/// before answering: a port found free can be taken by another test (or another test's
/// etcd) before this one binds it.
///
/// # Panics
/// When it does not answer within [`ETCD_START`], or exits three times; the panic quotes
/// the end of its log.
fn start_etcd<T>(
    dir: &std::path::Path,
    scheme: &str,
    extra: &[std::ffi::OsString],
    connect: impl Fn(&str) -> Result<T, StoreError>,
) -> (Child, String, T) {
    let log_tail = || {
        let log = std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    };
    for _ in 0..3 {
        let (client, peer) = (free_port(), free_port());
        let address = format!("127.0.0.1:{client}");
        let _ = std::fs::remove_dir_all(dir.join("data"));
        let mut child = spawn_etcd(dir, scheme, &address, peer, extra);
        let started = Instant::now();
        loop {
            match connect(&address) {
                Ok(answer) => return (child, address, answer),
                Err(e) => {
                    if child.try_wait().ok().flatten().is_some() {
                        break;
                    }
                    if started.elapsed() > ETCD_START {
                        let _ = child.kill();
                        let _ = child.wait();
                        panic!(
                            "etcd did not answer on {address} within {ETCD_START:?} ({e}); its log ends:\n{}",
                            log_tail()
                        );
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    panic!("etcd exited before answering, three times; its log ends:\n{}", log_tail());
}

/// The test user of a secure etcd ([`EtcdServer::start_secure`]) and its password.
pub const ETCD_USER: (&str, &str) = ("root", "stageplan-test-password");

impl EtcdServer {
    /// Starts etcd on free ports and waits until it answers.
    ///
    /// # Panics
    /// When `etcd` is not installed or does not answer within a minute.
    pub fn start() -> EtcdServer {
        let dir = temp_dir("etcd");
        let (child, address, _) = start_etcd(&dir, "http", &[], EtcdStore::connect);
        EtcdServer { child, address, dir, tls: None }
    }

    /// Starts etcd over TLS only, requiring client certificates signed by its own test CA,
    /// with authentication on and one user, [`ETCD_USER`] (etcd's `root`); certificates made
    /// by `openssl` (P-256 keys, for a day).
    ///
    /// # Panics
    /// When `etcd` or `openssl` is not installed or etcd does not answer within a minute.
    pub fn start_secure() -> EtcdServer {
        let dir = temp_dir("etcd-tls");
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let openssl = |args: &[&str]| {
            let status = Command::new("openssl")
                .args(args)
                .current_dir(&certs)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("`openssl` runs: install Debian's openssl (cargo xtask test does)");
            assert!(status.success(), "openssl {args:?} failed");
        };
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        openssl(
            &[
                &["req", "-x509"][..],
                &key,
                &["-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "1", "-subj", "/CN=stageplan test CA"],
            ]
            .concat(),
        );
        std::fs::write(certs.join("san.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        // The client's certificate names no CN: etcd's JSON gateway refuses one that does
        // once authentication is on (the user comes from the password, not the certificate).
        for (name, subject) in [("server", "/CN=127.0.0.1"), ("client", "/O=stageplan test client")] {
            openssl(
                &[
                    &["req"][..],
                    &key,
                    &["-keyout", &format!("{name}-key.pem"), "-out", &format!("{name}.csr"), "-subj", subject],
                ]
                .concat(),
            );
            openssl(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-out",
                &format!("{name}.pem"),
                "-days",
                "1",
                "-extfile",
                "san.cnf",
            ]);
        }
        let tls = [
            "--cert-file".into(),
            certs.join("server.pem").into_os_string(),
            "--key-file".into(),
            certs.join("server-key.pem").into_os_string(),
            "--client-cert-auth".into(),
            "--trusted-ca-file".into(),
            certs.join("ca.pem").into_os_string(),
        ];
        let options = EtcdServer::options_for(Some(&certs), None);
        let connect = |address: &str| EtcdStore::connect_with(address, &options);
        let (child, address, admin) = start_etcd(&dir, "https", &tls, connect);
        let server = EtcdServer { child, address, dir, tls: Some(certs) };
        admin.enable_auth(ETCD_USER.0, ETCD_USER.1).expect("etcd turns authentication on");
        server
    }

    /// How to reach it: its TLS certificates (the CA, the client's certificate and key),
    /// and `user` with its password.
    pub fn options(&self, user: Option<(&str, &str)>) -> crate::EtcdOptions {
        EtcdServer::options_for(self.tls.as_deref(), user)
    }

    fn options_for(certs: Option<&std::path::Path>, user: Option<(&str, &str)>) -> crate::EtcdOptions {
        let tls = certs.map(|certs| {
            let read = |name: &str| std::fs::read(certs.join(name)).expect("the test certificates are there");
            crate::Tls { ca: Some(read("ca.pem")), client: Some((read("client.pem"), read("client-key.pem"))) }
        });
        crate::EtcdOptions { tls, user: user.map(|(u, p)| (u.to_owned(), p.to_owned())) }
    }

    /// The folder of its certificates, when it runs over TLS.
    pub fn certificates(&self) -> Option<&std::path::Path> {
        self.tls.as_deref()
    }

    /// `host:port` of its client endpoint.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// A store on it.
    ///
    /// # Panics
    /// When it stopped answering.
    pub fn store(&self) -> EtcdStore {
        let user = self.tls.as_ref().map(|_| ETCD_USER);
        EtcdStore::connect_with(&self.address, &self.options(user)).expect("etcd answers")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Debian's `prometheus` on a free port, scraping every second, its data in a folder of
/// its own; killed when dropped.
#[derive(Debug)]
pub struct PrometheusServer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    dir: PathBuf,
}

impl PrometheusServer {
    /// Starts it with `scrape_configs`, the YAML list of its jobs (each line indented as a
    /// list item: `- job_name: …`).
    ///
    /// # Panics
    /// When `prometheus` is not installed.
    pub fn start(scrape_configs: &str) -> PrometheusServer {
        let dir = temp_dir("prometheus");
        let port = free_port();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n{}",
                scrape_configs.trim_end()
            ) + "\n",
        )
        .expect("the temporary folder is writable");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("`prometheus` runs: install Debian's prometheus (cargo xtask test does)");
        PrometheusServer { child, url: format!("http://127.0.0.1:{port}"), dir }
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
