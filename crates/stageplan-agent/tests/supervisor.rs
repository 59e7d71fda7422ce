//! The supervisor and the guard against real processes: `sh`, `sleep`, a listener of the
//! test's own, and programs that do not exist.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stageplan_agent::{Guard, Policy, Ready, Spec, State, Supervisor};

const GUARD: &str = env!("CARGO_BIN_EXE_stageplan-guard");

fn guard() -> Guard {
    Guard { program: GUARD.into(), args: Vec::new() }
}

/// A log folder of the test's own, emptied first.
fn folder(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stageplan-agent-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Short waits, so failures and restarts happen within a test.
fn policy(test: &str) -> Policy {
    Policy {
        start_timeout: Duration::from_secs(5),
        settle: Duration::from_millis(100),
        backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(400),
        attempts: 3,
        grace: Duration::from_secs(2),
        ..Policy::new(folder(test))
    }
}

fn spec(program: &str, args: &[&str], ready: Ready) -> Spec {
    Spec { program: program.into(), args: args.iter().map(|&a| a.to_owned()).collect(), env: Vec::new(), ready }
}

fn shell(script: &str) -> Spec {
    spec("/bin/sh", &["-c", script], Ready::Running)
}

fn wanted(specs: &[(&str, Spec)]) -> BTreeMap<String, Spec> {
    specs.iter().map(|(name, spec)| ((*name).to_owned(), spec.clone())).collect()
}

/// Polls until `done` holds for the process's state; panics with it after 10 s.
fn wait_until(supervisor: &mut Supervisor, name: &str, done: impl Fn(&State) -> bool) -> State {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        supervisor.poll();
        let state = supervisor.state(name).expect("the process is wanted").clone();
        if done(&state) {
            return state;
        }
        assert!(Instant::now() < deadline, "{name} stayed {state:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The live (not zombie) processes of a process group, from `/proc`.
fn members(group: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(") ") else { continue };
        let fields: Vec<&str> = rest.split(' ').collect();
        if fields.len() > 2 && fields[2] == group.to_string() && !matches!(fields[0], "Z" | "X") {
            out.push(pid);
        }
    }
    out
}

/// Waits up to 5 s for a group to have no live process; its members if it still has some.
fn emptied(group: u32) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = members(group);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_process_that_serves_is_stopped_with_its_whole_group() {
    for guard in [None, Some(guard())] {
        let mut supervisor = Supervisor::new(Policy { guard: guard.clone(), ..policy("serves") }).unwrap();
        supervisor.apply(&wanted(&[("stage", shell("sleep 60 & sleep 60 & wait"))]));
        assert_eq!(wait_until(&mut supervisor, "stage", |s| *s != State::Starting), State::Serving, "{guard:?}");
        let group = supervisor.group("stage").unwrap();
        assert!(members(group).len() >= 3, "sh and its two sleeps (and the guard): {:?}", members(group));
        supervisor.apply(&BTreeMap::new());
        assert_eq!(emptied(group), Vec::<u32>::new(), "{guard:?}");
        assert_eq!(supervisor.states().count(), 0);
    }
}

#[test]
fn a_crash_at_start_is_retried_with_backoff_then_left_failed() {
    let mut supervisor = Supervisor::new(policy("crash")).unwrap();
    let began = Instant::now();
    let mut crash = shell("echo \"boom $$ $STAGE\" >&2; printf 'bell\\007\\n'; exit 3");
    crash.env.push(("STAGE".to_owned(), "two".to_owned()));
    supervisor.apply(&wanted(&[("stage", crash)]));
    let state = wait_until(&mut supervisor, "stage", |s| matches!(s, State::Failed { .. }));
    let State::Failed { failures, last } = state else { unreachable!() };
    assert_eq!(failures, 3);
    assert_eq!(supervisor.starts("stage"), 3, "three starts, then left failed");
    assert_eq!(last.why, "exited with status 3 before serving");
    assert!(last.log_tail.iter().any(|l| l.starts_with("boom ") && l.ends_with(" two")), "{:?}", last.log_tail);
    assert_eq!(last.log_tail.last().map(String::as_str), Some("bell?"), "a control character reaches no terminal");
    // Restarts after 100 ms, then 200 ms.
    assert!(began.elapsed() >= Duration::from_millis(300), "{:?}", began.elapsed());
    // Left failed: polling longer starts nothing.
    for _ in 0..20 {
        supervisor.poll();
        std::thread::sleep(Duration::from_millis(30));
    }
    assert_eq!(supervisor.starts("stage"), 3);
}

#[test]
fn a_missing_binary_is_reported_not_retried_in_a_tight_loop() {
    let missing = "/nonexistent/llama-server";
    let mut supervisor = Supervisor::new(policy("missing")).unwrap();
    supervisor.apply(&wanted(&[("stage", spec(missing, &["--port", "1"], Ready::Running))]));
    let State::Restarting { failures: 1, last } = supervisor.state("stage").unwrap().clone() else {
        panic!("{:?}", supervisor.state("stage"));
    };
    assert!(last.why.starts_with("cannot start /nonexistent/llama-server: "), "{}", last.why);
    let state = wait_until(&mut supervisor, "stage", |s| matches!(s, State::Failed { .. }));
    assert!(matches!(state, State::Failed { failures: 3, .. }));
    // Under the guard, the guard says why, in the log.
    let mut supervisor = Supervisor::new(Policy { guard: Some(guard()), ..policy("missing-guarded") }).unwrap();
    supervisor.apply(&wanted(&[("stage", spec(missing, &[], Ready::Running))]));
    let State::Failed { last, .. } = wait_until(&mut supervisor, "stage", |s| matches!(s, State::Failed { .. })) else {
        unreachable!()
    };
    assert_eq!(last.why, "exited with status 127 before serving");
    assert!(last.log_tail.iter().any(|l| l.contains("cannot start /nonexistent/llama-server")), "{:?}", last.log_tail);
}

#[test]
fn serving_means_the_health_check_answers_200() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    // Loading for the first three requests, as llama-server answers while it reads the model.
    let server = std::thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate().take(4) {
            let mut stream = stream.unwrap();
            let mut request = [0u8; 256];
            let n = stream.read(&mut request).unwrap();
            assert!(request[..n].starts_with(b"GET /health HTTP/1.1\r\n"));
            let status = if i < 3 { "503 Service Unavailable" } else { "200 OK" };
            let _ = write!(stream, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let mut supervisor = Supervisor::new(policy("health")).unwrap();
    let ready = Ready::Http { address, path: "/health".to_owned() };
    supervisor.apply(&wanted(&[("server", spec("sleep", &["60"], ready))]));
    for _ in 0..3 {
        supervisor.poll();
        assert_eq!(supervisor.state("server"), Some(&State::Starting));
    }
    supervisor.poll();
    assert_eq!(supervisor.state("server"), Some(&State::Serving));
    server.join().unwrap();
}

#[test]
fn not_serving_in_time_is_a_failed_start() {
    // A port nobody listens on.
    let address = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let policy = Policy { start_timeout: Duration::from_millis(300), ..policy("timeout") };
    let mut supervisor = Supervisor::new(policy).unwrap();
    supervisor.apply(&wanted(&[("rpc", spec("sleep", &["60"], Ready::Tcp(address)))]));
    let group = supervisor.group("rpc").unwrap();
    let State::Restarting { failures: 1, last } =
        wait_until(&mut supervisor, "rpc", |s| matches!(s, State::Restarting { .. }))
    else {
        panic!()
    };
    assert_eq!(last.why, "not serving 0.3 s after its start");
    assert_eq!(emptied(group), Vec::<u32>::new(), "the late process is stopped");
}

#[test]
fn a_changed_spec_replaces_the_process() {
    let mut supervisor = Supervisor::new(policy("changed")).unwrap();
    supervisor.apply(&wanted(&[("stage", spec("sleep", &["60"], Ready::Running))]));
    wait_until(&mut supervisor, "stage", |s| *s == State::Serving);
    let old = supervisor.group("stage").unwrap();
    // The same spec again changes nothing.
    supervisor.apply(&wanted(&[("stage", spec("sleep", &["60"], Ready::Running))]));
    assert_eq!(supervisor.group("stage"), Some(old));
    supervisor.apply(&wanted(&[("stage", spec("sleep", &["61"], Ready::Running))]));
    assert_eq!(emptied(old), Vec::<u32>::new());
    assert_ne!(supervisor.group("stage"), Some(old));
    assert_eq!(supervisor.starts("stage"), 1, "a new spec starts a new count");
}

#[test]
fn dropping_the_supervisor_stops_everything() {
    let mut supervisor = Supervisor::new(Policy { guard: Some(guard()), ..policy("drop") }).unwrap();
    supervisor.apply(&wanted(&[("a", spec("sleep", &["60"], Ready::Running)), ("b", shell("sleep 60 & wait"))]));
    let groups = [supervisor.group("a").unwrap(), supervisor.group("b").unwrap()];
    drop(supervisor);
    for group in groups {
        assert_eq!(emptied(group), Vec::<u32>::new());
    }
}

/// An agent killed outright cannot stop anything: its engines' guard notices that its parent
/// is gone and kills the group. Without a guard the same engine outlives its parent.
#[test]
fn an_agent_killed_outright_takes_its_engines_with_it() {
    let started = |script: &str| {
        // The stand-in agent: starts the engine (in its own group, as the supervisor does),
        // prints its group and exits.
        let output = Command::new("/bin/sh")
            .args(["-c", script, "sh", GUARD])
            .process_group(0)
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap().trim().parse::<u32>().unwrap()
    };
    use std::os::unix::process::CommandExt;
    let group = started("\"$1\" --parent $$ -- sleep 60 </dev/null >/dev/null 2>&1 & echo $$");
    assert_eq!(emptied(group), Vec::<u32>::new(), "the guard killed its engine");
    let group = started("sleep 60 </dev/null >/dev/null 2>&1 & echo $$");
    let left = members(group);
    assert_eq!(left.len(), 1, "unguarded, the engine lives on: {left:?}");
    let group = nix::unistd::Pid::from_raw(i32::try_from(group).unwrap());
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    let group = group.as_raw().unsigned_abs();
    assert_eq!(emptied(group), Vec::<u32>::new());
}
