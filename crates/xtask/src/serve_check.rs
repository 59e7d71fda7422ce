//! `cargo xtask serve-check`: what several users see from a real llama-server on this
//! machine (issue #47), the ground truth a serving plan is to be checked against.
//!
//! The model is the CPU check's Llama 3.2 1B shape in Q8_0 (1.32 GB of random weights, past
//! any cache). For each count of concurrent users, a llama-server with that many slots
//! (`--parallel`, each slot [`CONTEXT_PER_SLOT`] tokens, continuous batching as it runs by
//! default) serves users who each send a request, read its tokens as they stream, and send
//! the next the moment it ends: a fixed concurrency, as vLLM's `benchmark_serving
//! --max-concurrency` and most published concurrency tables measure. Every request is
//! [`PROMPT`] prompt tokens (ids, so the count is exact; the prompt cache off, so each is
//! prefilled whole) and [`RESPONSE`] generated tokens (end of sequence ignored).
//!
//! Per request: the time to first token (sent to first streamed token) and the time per
//! output token after it. Per count: their 50th and 95th percentiles, and the aggregate
//! tok/s (tokens generated over the time from the first request to the last token). Beside
//! each, the same figures as `stageplan plan --users N` prints them
//! ([`stageplan::serving::simulate`]: llama-server's scheduler run over the plan's steps)
//! for the machine as `stageplan probe --cpu --engine` measures it on the same file, with
//! the same load.
//!
//! Then the same users of a pipeline: the model split in two halves, each on "a machine" that
//! is an rpc-server on this CPU, run as `stageplan export --to llama-cpp` writes it (the
//! plan's own launches, `stageplan::export::llama_cpp_launches`: both rpc-servers and one
//! llama-server with `--rpc`, `--device RPC0,RPC1` and `--tensor-split`), beside what
//! `stageplan plan --users N` says of that split. The devices run each step in turn, so both
//! halves get the whole CPU. The tables go to standard output and
//! `~/.cache/stageplan/serve-check.md`; they are recorded, not asserted (issue #47 asks for
//! 15% on TTFT and TPOT, 10% on tok/s).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Requests each user sends, one after another: as `stageplan plan --users` simulates them.
const REQUESTS: usize = stageplan::serving::REQUESTS_PER_USER as usize;

/// Concurrent users, one server each.
const USERS: [usize; 4] = [1, 2, 4, 8];
/// Prompt tokens of every request.
const PROMPT: usize = 128;
/// Tokens generated for every request.
const RESPONSE: usize = 64;
/// Each slot's context: the prompt and the response with room to spare.
const CONTEXT_PER_SLOT: usize = 512;

/// One request as its user saw it.
struct Request {
    sent: Instant,
    first: Instant,
    last: Instant,
    tokens: usize,
}

impl Request {
    fn ttft_s(&self) -> f64 {
        (self.first - self.sent).as_secs_f64()
    }

    fn tpot_s(&self) -> f64 {
        (self.last - self.first).as_secs_f64() / (self.tokens.saturating_sub(1).max(1)) as f64
    }
}

/// A count of users' figures, and the plan's.
struct Row {
    users: usize,
    requests: usize,
    ttft: [f64; 2],
    tpot: [f64; 2],
    aggregate: f64,
    wall_s: f64,
    /// The same load as `stageplan plan --users` simulates it: TTFT and TPOT p50/p95, tok/s.
    simulated: Simulated,
}

/// What `stageplan plan --users N --format json` says the users see.
struct Simulated {
    ttft_s: [f64; 2],
    tpot_s: [f64; 2],
    tokens_per_s: f64,
}

pub(crate) fn serve_check(python: &Path, llama_cpp: &Path, cli: &Path) -> Result<(), String> {
    let model = crate::cpu_check::models(python, llama_cpp)?.join("llama-1b-Q8_0.gguf");
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let node = crate::cpu_check::probe(cli, &llama_cpp.join("llama-bench"), &model, threads)?.node;
    let one = serde_json::json!({
        "model": {"file": model},
        "workload": {"context": CONTEXT_PER_SLOT, "prompt": PROMPT, "response": RESPONSE},
        "nodes": [node],
    });
    let mut tables = String::new();
    let mut rows = Vec::new();
    for users in USERS {
        let (simulated, _) = simulated(cli, &one, users)?;
        let server = Servers::one(&llama_cpp.join("llama-server"), &model, users, threads)?;
        rows.push(measure(&server, users, simulated)?);
    }
    tables += &table("llama-server", &rows, threads);
    // Two halves of the layers, each on an rpc-server of this CPU.
    let half = |name: &str| {
        let mut half = node.clone();
        half["name"] = name.into();
        half
    };
    let layers = LLAMA_1B_LAYERS / 2;
    let pipeline = serde_json::json!({
        "model": {"file": model},
        "workload": {"context": CONTEXT_PER_SLOT, "prompt": PROMPT, "response": RESPONSE},
        "nodes": [half("a"), half("b")],
        "links": {"default": loopback()},
        "policy": "manual",
        "stages": [{"node": "a", "layers": [0, layers]}, {"node": "b", "layers": [layers, LLAMA_1B_LAYERS]}],
    });
    let mut rows = Vec::new();
    for users in USERS {
        let (simulated, plan) = simulated(cli, &pipeline, users)?;
        let servers = Servers::pipeline(llama_cpp, &model, &plan, threads)?;
        rows.push(measure(&servers, users, simulated)?);
    }
    tables += "\n";
    tables += &table("a pipeline of two rpc-servers (layers 0–8 and 8–16) under one llama-server", &rows, threads);
    println!("{tables}");
    let out = crate::cache().join("serve-check.md");
    std::fs::write(&out, &tables).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(())
}

/// Blocks of the CPU check's Llama 3.2 1B shape.
const LLAMA_1B_LAYERS: usize = 16;

/// The link between two processes on 127.0.0.1, as the scenario states it: each step's RPC
/// round trips are a fraction of a millisecond there.
fn loopback() -> serde_json::Value {
    serde_json::json!({"bandwidth": "1 GB/s", "latency": "100 us"})
}

/// `users` users against `servers`, each sending [`REQUESTS`] requests one after another.
fn measure(servers: &Servers, users: usize, simulated: Simulated) -> Result<Row, String> {
    // One request first: the weights paged in and the server's first graphs built.
    request(servers.port, 0)?;
    let started = Instant::now();
    let handles: Vec<_> = (0..users)
        .map(|user| {
            let port = servers.port;
            std::thread::spawn(move || -> Result<Vec<Request>, String> {
                (0..REQUESTS).map(|k| request(port, user * REQUESTS + k + 1)).collect()
            })
        })
        .collect();
    let mut done = Vec::new();
    for handle in handles {
        done.extend(handle.join().map_err(|_| "a user's thread panicked".to_owned())??);
    }
    let end = done.iter().map(|r| r.last).max().unwrap_or(started);
    let wall_s = (end - started).as_secs_f64();
    let tokens: usize = done.iter().map(|r| r.tokens).sum();
    let ttft: Vec<f64> = done.iter().map(Request::ttft_s).collect();
    let tpot: Vec<f64> = done.iter().map(Request::tpot_s).collect();
    let quantiles = |v: &[f64]| [quantile(v, 0.5), quantile(v, 0.95)];
    eprintln!("    {users} users: {} requests in {wall_s:.1} s", done.len());
    Ok(Row {
        users,
        requests: done.len(),
        ttft: quantiles(&ttft),
        tpot: quantiles(&tpot),
        aggregate: tokens as f64 / wall_s,
        wall_s,
        simulated,
    })
}

/// What `stageplan plan --users` says `users` see of `scenario`, and the plan it made.
fn simulated(cli: &Path, scenario: &serde_json::Value, users: usize) -> Result<(Simulated, serde_json::Value), String> {
    let file = crate::cache().join("serve-check-scenario.json");
    std::fs::write(&file, scenario.to_string()).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut plan = Command::new(cli);
    plan.args(["plan", "--format", "json", "--users", &users.to_string()]).arg(&file);
    let out = crate::cpu_check::json_of(&mut plan)?;
    let number = |pointer: &str| out.pointer(pointer).and_then(serde_json::Value::as_f64);
    let pair = |key: &str| -> Result<[f64; 2], String> {
        let at = |i: usize| number(&format!("/served/{key}/{i}")).ok_or(format!("the plan's `served` has no `{key}`"));
        Ok([at(0)?, at(1)?])
    };
    let simulated = Simulated {
        ttft_s: pair("ttft_s")?,
        tpot_s: pair("tpot_s")?,
        tokens_per_s: number("/served/tokens_per_s").ok_or("the plan's `served` has no tok/s")?,
    };
    Ok((simulated, out.get("plan").cloned().ok_or("the answer has no `plan`")?))
}

fn table(what: &str, rows: &[Row], threads: usize) -> String {
    let ms = |s: f64| format!("{:.0}", s * 1e3);
    let off = |planned: f64, measured: f64| format!("{:+.0}%", (planned / measured - 1.0) * 100.0);
    let mut out = format!(
        "{what}, llama-1b Q8_0 (1.32 GB), {threads} threads, {PROMPT}-token prompts, {RESPONSE} tokens each, \
         {REQUESTS} requests a user; simulated: `stageplan plan --users N` for the probed node\n\n\
         | users | requests | TTFT p50 ms | TTFT p95 ms | TPOT p50 ms | TPOT p95 ms | aggregate tok/s | wall s | simulated TTFT p50 / p95 ms | simulated TPOT p50 / p95 ms | simulated tok/s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        let s = &r.simulated;
        out += &format!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} ({}) / {} ({}) | {:.1} ({}) / {:.1} ({}) | {:.1} ({}) |\n",
            r.users,
            r.requests,
            ms(r.ttft[0]),
            ms(r.ttft[1]),
            r.tpot[0] * 1e3,
            r.tpot[1] * 1e3,
            r.aggregate,
            r.wall_s,
            ms(s.ttft_s[0]),
            off(s.ttft_s[0], r.ttft[0]),
            ms(s.ttft_s[1]),
            off(s.ttft_s[1], r.ttft[1]),
            s.tpot_s[0] * 1e3,
            off(s.tpot_s[0], r.tpot[0]),
            s.tpot_s[1] * 1e3,
            off(s.tpot_s[1], r.tpot[1]),
            s.tokens_per_s,
            off(s.tokens_per_s, r.aggregate)
        );
    }
    out
}

/// The `q`-quantile of `values`, nearest rank.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
    v.get(rank - 1).copied().unwrap_or(f64::NAN)
}

/// A llama-server on 127.0.0.1 and the rpc-servers it dials, killed when dropped.
struct Servers {
    children: Vec<Child>,
    port: u16,
}

/// A port no process on 127.0.0.1 listens on now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).map_err(|e| e.to_string())
}

impl Servers {
    /// One llama-server with `slots` slots on this CPU.
    fn one(binary: &Path, model: &Path, slots: usize, threads: usize) -> Result<Servers, String> {
        let port = free_port()?;
        let mut server = Command::new(binary);
        server
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--model"])
            .arg(model)
            .args(["--parallel", &slots.to_string(), "--ctx-size", &(slots * CONTEXT_PER_SLOT).to_string()])
            .args(["--threads", &threads.to_string(), "--threads-batch", &threads.to_string()]);
        let mut servers = Servers { children: Vec::new(), port };
        servers.spawn(&mut server, binary)?;
        servers.healthy()?;
        Ok(servers)
    }

    /// `plan`'s launches as `stageplan export --to llama-cpp` writes them, every machine on
    /// 127.0.0.1 at a port of its own, each `"$(nproc)"` this CPU's `threads`; llama-server
    /// serves on a free port.
    fn pipeline(llama_cpp: &Path, model: &Path, plan: &serde_json::Value, threads: usize) -> Result<Servers, String> {
        let plan: stageplan::Plan = serde_json::from_value(plan.clone()).map_err(|e| format!("the plan: {e}"))?;
        let mut options = stageplan::export::ExportOptions::for_plan(&plan);
        let mut rpc_ports = Vec::new();
        for stage in &plan.stages {
            let port = free_port()?;
            options.hosts.insert(stage.node.clone(), format!("127.0.0.1:{port}"));
            rpc_ports.push(port);
        }
        options.model = Some(model.to_str().ok_or("the model's path is not UTF-8")?.to_owned());
        let launches = stageplan::export::llama_cpp_launches(&plan, &options).map_err(|e| e.to_string())?;
        let port = free_port()?;
        let mut servers = Servers { children: Vec::new(), port };
        // The rpc-servers first: llama-server dials them as it starts.
        let (rpc, main): (Vec<_>, Vec<_>) = launches.iter().partition(|l| l.program != "llama-server");
        for launch in rpc.iter().chain(&main) {
            let binary = llama_cpp.join(launch.program);
            let mut command = Command::new(&binary);
            command.envs(launch.env.iter().map(|(k, v)| (*k, v.as_str())));
            for word in &launch.args {
                match word {
                    stageplan::export::Word::Flag(flag) => command.arg(flag),
                    stageplan::export::Word::Text(text) => command.arg(text),
                    stageplan::export::Word::Cores => command.arg(threads.to_string()),
                };
            }
            if launch.program == "llama-server" {
                command.args(["--host", "127.0.0.1", "--port", &port.to_string()]);
            }
            servers.spawn(&mut command, &binary)?;
            if launch.program != "llama-server" {
                let dialed = launch.dialed.as_deref().ok_or("an rpc-server's launch has no address")?;
                listening(dialed)?;
            }
        }
        servers.healthy()?;
        Ok(servers)
    }

    fn spawn(&mut self, command: &mut Command, binary: &Path) -> Result<(), String> {
        let child = command
            .env("LD_LIBRARY_PATH", binary.parent().unwrap_or(binary))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        self.children.push(child);
        Ok(())
    }

    /// Waits until llama-server reports healthy, or a process exits.
    fn healthy(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            for child in &mut self.children {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("a server exited ({status}) before llama-server served"));
                }
            }
            if get(self.port, "/health").is_ok_and(|status| status == 200) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err("llama-server did not report healthy within 120 s".to_owned())
    }
}

/// Waits until `address` (`host:port`) accepts a connection.
fn listening(address: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect(address).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("no rpc-server listened on {address} within 30 s"))
}

impl Drop for Servers {
    fn drop(&mut self) {
        // llama-server first, then the rpc-servers it dialed.
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The status code of `GET path`.
fn get(port: u16, path: &str) -> Result<u16, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).map_err(|e| e.to_string())?;
    line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| format!("no status in {line:?}"))
}

/// One streamed completion of [`PROMPT`] token ids (offset by `seed`, so no two prompts
/// are alike) and [`RESPONSE`] tokens.
fn request(port: u16, seed: usize) -> Result<Request, String> {
    let prompt: Vec<usize> = (0..PROMPT).map(|i| 1000 + (seed * 7919 + i * 104_729) % 100_000).collect();
    let body = serde_json::json!({
        "prompt": prompt,
        "n_predict": RESPONSE,
        "ignore_eos": true,
        "cache_prompt": false,
        "stream": true,
        "temperature": 0.0,
    })
    .to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    let sent = Instant::now();
    write!(
        stream,
        "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    // An event a token, but a token that ends inside a UTF-8 character waits for the next
    // (random weights make many): the count is the server's own, in its last event.
    let (mut first, mut last, mut tokens) = (None, sent, None);
    for line in BufReader::new(stream).lines() {
        let line = line.map_err(|e| e.to_string())?;
        // Server-sent events; chunked framing's size lines are not `data:` lines.
        let Some(data) = line.strip_prefix("data: ") else { continue };
        let event: serde_json::Value = serde_json::from_str(data).map_err(|e| format!("{e}: {data}"))?;
        let now = Instant::now();
        first.get_or_insert(now);
        last = now;
        if event["stop"].as_bool() == Some(true) {
            tokens = event["timings"]["predicted_n"].as_u64();
            break;
        }
    }
    let first = first.ok_or("the server streamed no token")?;
    let tokens = tokens.ok_or("the stream ended without the server's last event")? as usize;
    if tokens != RESPONSE {
        return Err(format!("the server generated {tokens} tokens, not {RESPONSE}"));
    }
    Ok(Request { sent, first, last, tokens })
}
