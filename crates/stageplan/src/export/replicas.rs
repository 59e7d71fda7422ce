//! Replicas ([`crate::serving::replicas`]) as their engine runs them: each replica its own
//! export — llama.cpp's rpc-servers and one llama-server with a slot per user, or one `vllm
//! serve` — its server listening for a balancer, and the balancer's list: nginx, each
//! replica weighted by the users it serves, sent the requests of whoever has fewest in
//! flight for its weight (`least_conn`), which keeps each replica's share of users as
//! planned.

use std::fmt::Write;

use serde::Deserialize;

use super::{Export, ExportError, ExportOptions, Layout, Target, Word, llama_cpp, vllm};
use crate::engine::Engine;
use crate::plan::Plan;

/// The port each replica's server listens on for the balancer: llama-server's own default
/// (vLLM's is the balancer's), on every interface rather than llama-server's loopback.
pub const REPLICA_PORT: u16 = 8080;

/// The port the balancer listens on: beside a replica's server, on another port.
pub const BALANCER_PORT: u16 = 8000;

/// The balancer's configuration, as the export writes it (a here-document: the export stays
/// a shell script).
const BALANCER_FILE: &str = "stageplan-balancer.conf";

/// Names as a list in words: `` `a`, `b` ``.
fn listed<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = names.map(|name| format!("`{}`", crate::quote::line(name))).collect();
    if quoted.is_empty() { "none".to_owned() } else { quoted.join(", ") }
}

/// The most replicas an export takes: what [`crate::serving::replicas`] splits at most.
const MAX_EXPORTED_REPLICAS: usize = crate::serving::MAX_REPLICA_MACHINES;

/// One replica of what `stageplan plan --ttft … --format json` printed: its machines, the
/// users it serves and its plan.
#[derive(Clone, Debug, Deserialize)]
pub struct ReplicaPlan {
    pub machines: Vec<String>,
    pub users: u32,
    pub plan: Plan,
}

/// What every replica behind one balancer must share (each is a llama-server, checked
/// apart): the same model, as the same file and weights, with the same cache for the same
/// context.
fn served_alike(a: &Plan, b: &Plan) -> bool {
    (&a.model.name, &a.model.weights, &a.model.file) == (&b.model.name, &b.model.weights, &b.model.file)
        && (a.workload.context, &a.workload.kv, &a.workload.kv_v)
            == (b.workload.context, &b.workload.kv, &b.workload.kv_v)
}

/// What a replica serves, as [`served_alike`] compares it: `` `name` (weights from `file`, a
/// K/V cache of N tokens) ``.
fn served(plan: &Plan) -> String {
    let file = plan.model.file.as_deref().map_or_else(String::new, |f| format!(" from `{}`", crate::quote::line(f)));
    let v = plan.workload.kv_v.as_deref().map_or_else(String::new, |v| format!("/{}", crate::quote::line(v)));
    format!(
        "`{}` ({}{file}, a {}{v} cache of {} tokens)",
        crate::quote::line(&plan.model.name),
        crate::quote::line(&plan.model.weights),
        crate::quote::line(&plan.workload.kv),
        plan.workload.context
    )
}

/// Exports replicas to the engine they were planned for (llama.cpp or vLLM): every
/// replica's processes, each server on [`REPLICA_PORT`] of every interface, then nginx's list
/// of them, as a file the script writes.
///
/// # Errors
/// A target other than llama.cpp and vLLM, or other than the replicas' engine, `--main`
/// (each replica's first stage runs its server), no replicas or more than
/// [`crate::serving::MAX_REPLICA_MACHINES`], a replica whose users are not its plan's slots
/// (llama.cpp) or fewer than its plan's sequences (vLLM), or whose machines are not its
/// stages', a machine in two replicas, replicas of different models, caches or contexts,
/// riders, two servers at one address, an address nginx reads as a socket, or what
/// [`super::export`] refuses in a replica's plan.
pub fn replicas(replicas: &[ReplicaPlan], target: Target, options: &ExportOptions) -> Result<Export, ExportError> {
    let (engine, server_name) = match target {
        Target::LlamaCpp => (Engine::LlamaCpp, "llama-server"),
        Target::Vllm => (Engine::Vllm, "vLLM server"),
        _ => {
            return Err(ExportError::Option {
                option: "--to",
                value: target.name().to_owned(),
                problem: "cannot run these replicas: they were planned and simulated as llama-servers or vLLM servers; export them with `--to llama.cpp` or `--to vllm`, as their plans' engine",
            });
        }
    };
    if let Some(main) = &options.main {
        return Err(ExportError::Option {
            option: "--main",
            value: main.clone(),
            problem: "does not apply to replicas: each runs its server on its first stage's machine; drop `--main`",
        });
    }
    let invalid = |problem: String| Err(ExportError::Plan { field: "replicas", problem });
    if replicas.is_empty() || replicas.len() > MAX_EXPORTED_REPLICAS {
        return invalid(format!(
            "has {} replicas; export 1 to {MAX_EXPORTED_REPLICAS}, as `stageplan plan` splits them",
            replicas.len()
        ));
    }
    let mut text = String::new();
    let mut notes: Vec<String> = Vec::new();
    let mut servers: Vec<(String, u32)> = Vec::new();
    let mut machines: Vec<&str> = Vec::new();
    for (i, replica) in replicas.iter().enumerate() {
        if !replica.plan.riders.is_empty() || !matches!(replica.plan.engine, Engine::LlamaCpp | Engine::Vllm) {
            return invalid(format!(
                "[{i}].plan is not a replica's: replicas are planned for llama.cpp or vLLM without a draft or projector; export what `stageplan plan` printed"
            ));
        }
        if replica.plan.engine != engine {
            let to = Target::of_engine(replica.plan.engine).map_or("its engine", Target::name);
            return invalid(format!(
                "[{i}].plan is planned for {}: export these replicas with `--to {to}`, the engine they were simulated on",
                replica.plan.engine.rules().name
            ));
        }
        if !served_alike(&replica.plan, &replicas[0].plan) {
            return invalid(format!(
                "[{i}] serves {} where [0] serves {}; one balancer sends any request to any replica, so export replicas of one plan, as `stageplan plan` printed them",
                served(&replica.plan),
                served(&replicas[0].plan),
            ));
        }
        let in_replica = |error| ExportError::InReplica { index: i, error: Box::new(error) };
        let layout = Layout::new(&replica.plan, options).map_err(in_replica)?;
        // llama-server has a slot a user; vLLM runs up to its `--max-num-seqs` at once, the
        // rest waiting their turn.
        let batch = replica.plan.workload.batch;
        let fits = match engine {
            Engine::Vllm => u64::from(replica.users) >= batch && batch > 0,
            _ => u64::from(replica.users) == batch,
        };
        if !fits || replica.users == 0 {
            return invalid(format!(
                "[{i}].users is {}, and its plan has {batch} slots (`workload.batch`); export what `stageplan plan` printed",
                replica.users
            ));
        }
        // The replica's machines, each once (a machine's GPUs may hold several stages).
        let mut names: Vec<&str> = Vec::new();
        for &(node, _, _) in &layout.stages {
            let machine = layout.machine(node).0;
            if machines.contains(&machine) {
                return invalid(format!("put `{machine}` in two replicas; give each machine to one"));
            }
            if !names.contains(&machine) {
                names.push(machine);
            }
        }
        if replica.machines.iter().map(String::as_str).ne(names.iter().copied()) {
            return invalid(format!(
                "[{i}].machines are {}, and its plan's stages are on {}; export what `stageplan plan` printed",
                listed(replica.machines.iter().map(String::as_str)),
                listed(names.iter().copied())
            ));
        }
        let main = layout.main();
        let address = layout.host_with(main, REPLICA_PORT);
        // nginx's `server unix:…` is a UNIX socket's path.
        if layout.host(main).eq_ignore_ascii_case("unix") {
            return Err(ExportError::Option {
                option: "--host",
                value: main.to_owned(),
                problem: "would be `unix`, which nginx's `server` reads as a socket's path; give the machine's address with `--host NAME=ADDRESS`",
            });
        }
        if let Some(j) = servers.iter().position(|(other, _)| other.eq_ignore_ascii_case(&address)) {
            return invalid(format!(
                "[{i}] and [{j}] would both listen at {}; give each replica's first machine its own address with `--host NAME=ADDRESS`",
                crate::quote::line(&address)
            ));
        }
        let (export, replica_notes) = match engine {
            Engine::Vllm => {
                // The export ends with `vllm serve`'s flags: it listens for the balancer too.
                let (export, notes) = vllm::export(&layout);
                let served = export.strip_suffix('\n').unwrap_or(&export);
                (format!("{served} \\\n  --host 0.0.0.0 \\\n  --port {REPLICA_PORT}\n"), notes)
            }
            _ => {
                let (mut export, notes, launches) = llama_cpp::export(&layout).map_err(in_replica)?;
                // The export ends with llama-server's command: it listens for the balancer too.
                if let Some(server) = launches.last().filter(|l| l.program == "llama-server")
                    && let Some(rest) = export.strip_suffix(&server.flag_lines())
                {
                    let mut server = server.clone();
                    server.args.extend([
                        Word::Flag("--host"),
                        Word::Text("0.0.0.0".to_owned()),
                        Word::Flag("--port"),
                        Word::Text(REPLICA_PORT.to_string()),
                    ]);
                    export = rest.to_owned() + &server.flag_lines();
                }
                (export, notes)
            }
        };
        let _ = writeln!(
            text,
            "# ==== Replica {} of {}: {}, {} {} ({}) ====",
            i + 1,
            replicas.len(),
            names.join(", "),
            replica.users,
            if replica.users == 1 { "user" } else { "users" },
            if engine == Engine::Vllm { "KV blocks from its pool" } else { "a slot each" }
        );
        text.push_str(&export);
        text.push('\n');
        machines.extend(names);
        servers.push((address, replica.users));
        for note in replica_notes {
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    let _ = writeln!(
        text,
        "# ==== The balancer: nginx, on any machine that reaches them all ====\n\
         # Each request goes to the replica with the fewest in flight for its weight, its users:\n\
         # every replica keeps its planned share. Clients use this machine's port {BALANCER_PORT}.\n\
         # Include the file written here in nginx's `http` block.\n\
         cat > {BALANCER_FILE} <<'NGINX'"
    );
    text.push_str("upstream stageplan {\n    least_conn;\n");
    for (address, users) in &servers {
        let _ = writeln!(text, "    server {address} weight={users};");
    }
    let _ = write!(
        text,
        "}}\nserver {{\n    listen {BALANCER_PORT};\n    location / {{\n        proxy_pass http://stageplan;\n        \
         proxy_buffering off;\n        proxy_read_timeout 1h;\n    }}\n}}\nNGINX\n"
    );
    notes.push(format!(
        "Each {server_name} listens on port {REPLICA_PORT} of every interface for the balancer, and has no authentication: keep it on a network only the balancer reaches, or add `--api-key`."
    ));
    Ok(Export { target, file_name: target.file_name().to_owned(), text, notes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::{Percentile, Targets};

    /// Two GPUs that each hold a 1B model: the answer splits them into two replicas.
    fn two_replicas() -> Vec<ReplicaPlan> {
        replicas_of(r#""weights": "q8_0""#, "llama.cpp")
    }

    /// Two GPUs that each hold a 1B model of `weights` on `engine`, split into replicas.
    fn replicas_of(weights: &str, engine: &str) -> Vec<ReplicaPlan> {
        let json = format!(
            r#"{{"model": {{"preset": "llama-3.2-1b", {weights}}}, "engine": "{engine}",
                "workload": {{"context": 4096, "prompt": 128, "response": 64}},
                "nodes": [{{"name": "gpu", "device": "rtx-3060-12gb"}}, {{"name": "twin", "device": "rtx-3060-12gb"}}]}}"#
        );
        let problem = crate::check(json.as_str(), crate::check::no_model_files).unwrap().problem;
        let targets = Targets { ttft_s: None, tpot_s: Some(0.02), percentile: Percentile::P95 };
        let answer = crate::serving::answer(&problem, crate::demand::Demand::of_targets(targets)).unwrap();
        let split = answer.replicas.expect("two replicas");
        split.replicas.into_iter().map(|r| ReplicaPlan { machines: r.machines, users: r.users, plan: r.plan }).collect()
    }

    #[test]
    fn each_replica_serves_its_users_and_the_balancer_weighs_them() {
        let replicas = two_replicas();
        let options = ExportOptions { hosts: [("twin".into(), "10.0.0.2".into())].into(), ..ExportOptions::default() };
        let export = super::replicas(&replicas, Target::LlamaCpp, &options).unwrap();
        let blocks: Vec<&str> = export.text.split("# ==== ").skip(1).collect();
        assert_eq!(blocks.len(), 3, "{}", export.text);
        for (replica, block) in replicas.iter().zip(&blocks) {
            let slots = replica.plan.workload.batch;
            assert_eq!(u64::from(replica.users), slots);
            for flag in [
                format!("--parallel {slots} \\"),
                format!("--ctx-size {} \\", slots * replica.plan.workload.context),
                "--host 0.0.0.0 \\".to_owned(),
                "--port 8080\n".to_owned(),
            ] {
                assert!(block.contains(&flag), "{flag} in {block}");
            }
            let address = if replica.plan.stages[0].node == "twin" { "10.0.0.2" } else { "gpu" };
            let server = format!("    server {address}:8080 weight={};\n", replica.users);
            assert!(blocks[2].contains(&server), "{server} in {}", blocks[2]);
        }
        assert!(blocks[2].contains("least_conn;") && blocks[2].contains("listen 8000;"), "{}", blocks[2]);
        // nginx's part is a here-document: the export stays a shell script.
        let balancer = blocks[2].split_once("cat > stageplan-balancer.conf <<'NGINX'\n").unwrap().1;
        assert!(balancer.starts_with("upstream stageplan {") && balancer.ends_with("}\nNGINX\n"), "{balancer}");
    }

    /// vLLM's replicas: a `vllm serve` each, listening for the balancer, its users at least
    /// its sequences at once (the rest wait in its queue), weighted by them.
    #[test]
    fn vllm_replicas_each_serve_their_users_behind_the_balancer() {
        let replicas = replicas_of(r#""weights": "bf16""#, "vllm");
        let options = ExportOptions { hosts: [("twin".into(), "10.0.0.2".into())].into(), ..ExportOptions::default() };
        let export = super::replicas(&replicas, Target::Vllm, &options).unwrap();
        let blocks: Vec<&str> = export.text.split("# ==== ").skip(1).collect();
        assert_eq!(blocks.len(), 3, "{}", export.text);
        for (replica, block) in replicas.iter().zip(&blocks) {
            assert!(u64::from(replica.users) >= replica.plan.workload.batch, "{}", replica.users);
            let seqs = format!("--max-num-seqs {} \\", replica.plan.workload.batch);
            for flag in ["vllm serve meta-llama/Llama-3.2-1B", &seqs, "--host 0.0.0.0 \\", "--port 8080\n"] {
                assert!(block.contains(flag), "{flag} in {block}");
            }
            let address = if replica.plan.stages[0].node == "twin" { "10.0.0.2" } else { "gpu" };
            let server = format!("    server {address}:8080 weight={};\n", replica.users);
            assert!(blocks[2].contains(&server), "{server} in {}", blocks[2]);
        }
        assert!(
            export.notes.iter().any(|n| n.starts_with("Each vLLM server listens on port 8080")),
            "{:?}",
            export.notes
        );
        assert!(super::replicas(&replicas, Target::LlamaCpp, &options).unwrap_err().to_string().contains("--to vllm"));
    }

    #[test]
    fn what_replicas_cannot_be_is_refused_naming_why() {
        let replicas = two_replicas();
        let options = ExportOptions::default();
        let refused = |replicas: &[ReplicaPlan], target, options: &ExportOptions| {
            super::replicas(replicas, target, options).unwrap_err().to_string()
        };
        assert!(refused(&replicas, Target::Vllm, &options).contains("--to llama.cpp"));
        let main = ExportOptions { main: Some("gpu".into()), ..ExportOptions::default() };
        assert!(refused(&replicas, Target::LlamaCpp, &main).contains("drop `--main`"));
        let twice = [replicas[0].clone(), replicas[0].clone()];
        assert!(refused(&twice, Target::LlamaCpp, &options).contains("in two replicas"));
        let mut wrong = replicas.clone();
        wrong[0].users += 1;
        assert!(refused(&wrong, Target::LlamaCpp, &options).contains("slots"));
        assert!(refused(&[], Target::LlamaCpp, &options).contains("0 replicas"));
        let mut elsewhere = replicas.clone();
        elsewhere[1].machines = vec!["gpu".into()];
        assert!(refused(&elsewhere, Target::LlamaCpp, &options).contains("[1].machines are `gpu`"));
        for change in [
            |p: &mut Plan| p.model.name = "llama-3.1-70b".into(),
            |p: &mut Plan| p.workload.kv = "q4_0".into(),
            |p: &mut Plan| p.workload.context *= 2,
            |p: &mut Plan| p.model.file = Some("other.gguf".into()),
            |p: &mut Plan| p.workload.kv_v = Some("q8_0".into()),
        ] {
            let mut other = replicas.clone();
            change(&mut other[1].plan);
            let said = refused(&other, Target::LlamaCpp, &options);
            // The two replicas as the message tells them apart.
            let (this, first) = said.split_once(" where [0] serves ").expect("one balancer, one model");
            assert_ne!(
                this.strip_prefix("[1] serves "),
                first.split_once("; one balancer").map(|(first, _)| first),
                "{said}"
            );
        }
        let mut vllm = replicas.clone();
        vllm[1].plan.engine = crate::engine::Engine::Vllm;
        assert!(
            refused(&vllm, Target::LlamaCpp, &options)
                .contains("[1].plan is planned for vllm: export these replicas with `--to vllm`")
        );
        assert!(refused(&replicas, Target::Exo, &options).contains("`--to llama.cpp` or `--to vllm`"));
        let one_host = ExportOptions {
            hosts: [("gpu".into(), "10.0.0.1".into()), ("twin".into(), "10.0.0.1".into())].into(),
            ..ExportOptions::default()
        };
        assert!(refused(&replicas, Target::LlamaCpp, &one_host).contains("would both listen at 10.0.0.1:8080"));
        let socket = ExportOptions { hosts: [("twin".into(), "UNIX".into())].into(), ..ExportOptions::default() };
        assert!(refused(&replicas, Target::LlamaCpp, &socket).contains("socket"));
    }
}
