//! Named processes kept as wanted: started, watched, restarted with backoff, stopped.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// What to run: a program and its arguments, started without a shell, and how to tell that
/// it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Set for this process only, over the agent's own environment.
    pub env: Vec<(String, String)>,
    pub ready: Ready,
}

/// When a started process counts as serving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Still running after the policy's [`Policy::settle`].
    Running,
    /// Accepting connections at the address (an rpc-server).
    Tcp(SocketAddr),
    /// Answering `GET path` at the address with 200 (llama-server's `/health` answers 503
    /// while the model loads).
    Http { address: SocketAddr, path: String },
}

/// How to start the guard: a program and its first arguments, to which the supervisor adds
/// `--parent PID -- PROGRAM ARGS…` (`stageplan-guard`, or `stageplan guard`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// How the supervisor starts, waits, retries and stops.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Where each process's output goes, a file each, appended across restarts.
    pub log_dir: PathBuf,
    /// The guard to start each process under ([`crate::guard`]), so that nothing outlives
    /// an agent killed outright; `None` starts the process itself.
    pub guard: Option<Guard>,
    /// Not serving this long after its start: a failed start (its group is stopped).
    pub start_timeout: Duration,
    /// How long [`Ready::Running`] waits.
    pub settle: Duration,
    /// The first restart's delay, doubled after each further failure in a row.
    pub backoff: Duration,
    /// The longest delay between restarts.
    pub max_backoff: Duration,
    /// Failures in a row after which a process is left failed and reported, not retried.
    pub attempts: u32,
    /// Between SIGTERM and SIGKILL when stopping a process group.
    pub grace: Duration,
}

impl Policy {
    /// Defaults for engines: two minutes to load a model, restarts after 1, 2, 4, 8 s, left
    /// failed after five failures in a row, ten seconds to stop.
    pub fn new(log_dir: PathBuf) -> Policy {
        Policy {
            log_dir,
            guard: None,
            start_timeout: Duration::from_secs(120),
            settle: Duration::from_secs(2),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            attempts: 5,
            grace: Duration::from_secs(10),
        }
    }

    /// The delay before the restart that follows `failures` failures in a row (≥ 1).
    fn delay(&self, failures: u32) -> Duration {
        let doubled = self.backoff.saturating_mul(1 << failures.saturating_sub(1).min(20));
        doubled.min(self.max_backoff)
    }
}

/// A process's state, as the agent reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Started, not serving yet.
    Starting,
    /// Serving (see [`Ready`]).
    Serving,
    /// Stopped by a failure; started again after the policy's backoff.
    Restarting { failures: u32, last: Failure },
    /// Failed [`Policy::attempts`] times in a row: left stopped, reported.
    Failed { failures: u32, last: Failure },
}

/// Why a process stopped, in words, with its log's last lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub why: String,
    /// The last lines of its output, control characters replaced (they reach terminals).
    pub log_tail: Vec<String>,
}

/// Lines of a log a [`Failure`] keeps, read from at most [`TAIL_BYTES`] at its end.
const TAIL_LINES: usize = 10;
const TAIL_BYTES: u64 = 4096;
/// How often a stop looks whether the group's leader has exited.
const STOP_POLL: Duration = Duration::from_millis(20);
/// How long a readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

#[derive(Debug)]
struct Process {
    spec: Spec,
    log: PathBuf,
    child: Option<Child>,
    started: Instant,
    state: State,
    /// Failures in a row; a process that serves starts a new count.
    failures: u32,
    retry_at: Option<Instant>,
    starts: u32,
}

/// Keeps a set of named processes running as wanted. Dropping it stops them all.
///
/// It does nothing between calls: the agent calls [`Supervisor::poll`] every few hundred
/// milliseconds and [`Supervisor::apply`] when its bindings change. Stopping waits up to
/// [`Policy::grace`] per process.
#[derive(Debug)]
pub struct Supervisor {
    policy: Policy,
    processes: BTreeMap<String, Process>,
}

impl Supervisor {
    /// A supervisor with nothing running; creates the log folder.
    ///
    /// # Errors
    /// The log folder cannot be created.
    pub fn new(policy: Policy) -> std::io::Result<Supervisor> {
        std::fs::create_dir_all(&policy.log_dir)?;
        Ok(Supervisor { policy, processes: BTreeMap::new() })
    }

    /// Makes the set of processes `wanted`: stops those no longer in it or whose spec
    /// changed, starts those new to it (a changed spec starts again with a new count).
    pub fn apply(&mut self, wanted: &BTreeMap<String, Spec>) {
        let gone: Vec<String> = self
            .processes
            .iter()
            .filter(|(name, p)| wanted.get(*name) != Some(&p.spec))
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            if let Some(mut process) = self.processes.remove(&name) {
                stop(&mut process, self.policy.grace);
            }
        }
        for (name, spec) in wanted {
            if self.processes.contains_key(name) {
                continue;
            }
            let mut process = Process {
                spec: spec.clone(),
                log: self.policy.log_dir.join(log_name(name)),
                child: None,
                started: Instant::now(),
                state: State::Starting,
                failures: 0,
                retry_at: None,
                starts: 0,
            };
            start(&mut process, &self.policy);
            self.processes.insert(name.clone(), process);
        }
    }

    /// Looks at every process once: reaps exits, promotes those that serve, times out
    /// those that do not, restarts those whose backoff has passed.
    pub fn poll(&mut self) {
        let now = Instant::now();
        for process in self.processes.values_mut() {
            let Some(child) = process.child.as_mut() else {
                if process.retry_at.is_some_and(|at| now >= at) {
                    start(process, &self.policy);
                }
                continue;
            };
            match child.try_wait() {
                Ok(Some(status)) => {
                    let pid = child.id();
                    process.child = None;
                    // Whatever it left in its group goes with it.
                    kill_group(pid, Signal::SIGKILL);
                    let served = process.state == State::Serving;
                    let why = format!(
                        "exited with {}{}",
                        describe(status),
                        if served { " while serving" } else { " before serving" }
                    );
                    failed(process, &self.policy, why);
                }
                Ok(None) if process.state == State::Starting => {
                    if ready(&process.spec.ready, process.started, &self.policy) {
                        process.state = State::Serving;
                        process.failures = 0;
                    } else if process.started.elapsed() >= self.policy.start_timeout {
                        stop(process, self.policy.grace);
                        let why = format!("not serving {} s after its start", self.policy.start_timeout.as_secs_f64());
                        failed(process, &self.policy, why);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    stop(process, self.policy.grace);
                    failed(process, &self.policy, format!("cannot be waited for: {e}"));
                }
            }
        }
    }

    /// Every process's state, by name.
    pub fn states(&self) -> impl Iterator<Item = (&str, &State)> {
        self.processes.iter().map(|(name, p)| (name.as_str(), &p.state))
    }

    /// One process's state.
    pub fn state(&self, name: &str) -> Option<&State> {
        self.processes.get(name).map(|p| &p.state)
    }

    /// How many times the process was started (its first start included).
    pub fn starts(&self, name: &str) -> u32 {
        self.processes.get(name).map_or(0, |p| p.starts)
    }

    /// The process group (its leader's id) of a running process.
    pub fn group(&self, name: &str) -> Option<u32> {
        self.processes.get(name)?.child.as_ref().map(Child::id)
    }

    /// The file its output goes to.
    pub fn log(&self, name: &str) -> Option<&Path> {
        self.processes.get(name).map(|p| p.log.as_path())
    }

    /// Stops every process.
    pub fn shutdown(&mut self) {
        for process in self.processes.values_mut() {
            stop(process, self.policy.grace);
        }
        self.processes.clear();
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts `process` in a process group of its own, its output appended to its log.
fn start(process: &mut Process, policy: &Policy) {
    process.starts += 1;
    process.retry_at = None;
    process.started = Instant::now();
    let log = OpenOptions::new().create(true).append(true).open(&process.log);
    let spawned = log.and_then(|mut log| {
        let _ = writeln!(
            log,
            "--- stageplan-agent: start {} of {:?} {:?}",
            process.starts, process.spec.program, process.spec.args
        );
        let mut command = match &policy.guard {
            Some(guard) => {
                let mut c = Command::new(&guard.program);
                c.args(&guard.args)
                    .arg("--parent")
                    .arg(std::process::id().to_string())
                    .arg("--")
                    .arg(&process.spec.program);
                c
            }
            None => Command::new(&process.spec.program),
        };
        command
            .args(&process.spec.args)
            .envs(process.spec.env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
    });
    match spawned {
        Ok(child) => {
            process.child = Some(child);
            process.state = State::Starting;
        }
        Err(e) => {
            let why = format!("cannot start {}: {e}", process.spec.program.display());
            failed(process, policy, why);
        }
    }
}

/// Records a failure: restarting after the backoff, or failed for good.
fn failed(process: &mut Process, policy: &Policy, why: String) {
    process.failures = process.failures.saturating_add(1);
    let last = Failure { why, log_tail: tail(&process.log) };
    let failures = process.failures;
    if failures >= policy.attempts {
        process.retry_at = None;
        process.state = State::Failed { failures, last };
    } else {
        process.retry_at = Some(Instant::now() + policy.delay(failures));
        process.state = State::Restarting { failures, last };
    }
}

/// Stops a process's whole group: SIGTERM, then SIGKILL after `grace`.
fn stop(process: &mut Process, grace: Duration) {
    let Some(mut child) = process.child.take() else { return };
    let pid = child.id();
    kill_group(pid, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(STOP_POLL);
    }
    // The group outlives its leader while any member lives, and its id is not reused
    // until then: SIGKILL reaches only what is left of it.
    kill_group(pid, Signal::SIGKILL);
    let _ = child.wait();
}

fn kill_group(leader: u32, signal: Signal) {
    // `killpg` of 0 is the caller's own group, and of 1 every process: never either.
    if let Ok(pid) = i32::try_from(leader)
        && pid > 1
    {
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

fn ready(ready: &Ready, started: Instant, policy: &Policy) -> bool {
    match ready {
        Ready::Running => started.elapsed() >= policy.settle,
        Ready::Tcp(address) => TcpStream::connect_timeout(address, PROBE_TIMEOUT).is_ok(),
        Ready::Http { address, path } => http_ok(*address, path).unwrap_or(false),
    }
}

/// `GET path` answered with status 200.
fn http_ok(address: SocketAddr, path: &str) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect_timeout(&address, PROBE_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
    // One write: a server may read the request in one call.
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    // `HTTP/1.1 200`
    Ok(head.starts_with(b"HTTP/1.") && &head[8..12] == b" 200")
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("status {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "an unknown status".to_owned(),
    }
}

/// A file name for a process's log: its name's safe characters and a digest of the whole
/// name (two names never share a file).
fn log_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    let digest = blake3::hash(name.as_bytes()).to_hex();
    format!("{safe}-{}.log", &digest[..8])
}

/// The last lines of a log, control characters replaced.
fn tail(path: &Path) -> Vec<String> {
    let Ok(mut file) = File::open(path) else { return Vec::new() };
    let length = file.metadata().map_or(0, |m| m.len());
    let from = length.saturating_sub(TAIL_BYTES);
    if file.seek(SeekFrom::Start(from)).is_err() {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    if file.take(TAIL_BYTES).read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    // A read from the middle starts inside a line.
    if from > 0 && !lines.is_empty() {
        lines.remove(0);
    }
    let start = lines.len().saturating_sub(TAIL_LINES);
    lines[start..]
        .iter()
        .map(|l| l.chars().map(|c| if c.is_control() && c != '\t' { '?' } else { c }).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap() {
        let policy = Policy { max_backoff: Duration::from_secs(5), ..Policy::new(PathBuf::new()) };
        let delays: Vec<u64> = (1..=6).map(|f| policy.delay(f).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 5, 5, 5]);
        assert_eq!(policy.delay(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn two_names_never_share_a_log() {
        assert_ne!(log_name("a/b"), log_name("a_b"));
        assert!(log_name("../../etc/passwd").starts_with("______etc_passwd-"));
        assert!(!log_name(&"x".repeat(10_000)).contains('/'));
    }
}
