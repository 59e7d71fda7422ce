//! Replicas ([`crate::serving::replicas`]) as llama.cpp runs them: each replica its own
//! llama.cpp export (its rpc-servers and one llama-server with a slot per user), the
//! llama-server listening for a balancer, and the balancer's list: nginx, each replica
//! weighted by the users it serves, sent the requests of whoever has fewest in flight for
//! its weight (`least_conn`), which keeps each replica's share of users as planned.

use std::fmt::Write;

use serde::Deserialize;

use super::{Export, ExportError, ExportOptions, Layout, Target, Word, llama_cpp};
use crate::plan::Plan;

/// The port each replica's llama-server listens on for the balancer: llama-server's own
/// default, on every interface rather than its default loopback.
pub const REPLICA_PORT: u16 = 8080;

/// The port the balancer listens on: beside a replica's llama-server, on another port.
pub const BALANCER_PORT: u16 = 8000;

/// The most replicas an export takes: what [`crate::serving::replicas`] splits at most.
const MAX_EXPORTED_REPLICAS: usize = crate::serving::MAX_REPLICA_MACHINES;

/// One replica of what `stageplan plan --ttft … --format json` printed: the users it serves
/// and its plan.
#[derive(Clone, Debug, Deserialize)]
pub struct ReplicaPlan {
    pub users: u32,
    pub plan: Plan,
}

/// Exports replicas to llama.cpp: every replica's processes, each llama-server on
/// [`REPLICA_PORT`] of every interface, then nginx's list of them.
///
/// # Errors
/// A target other than llama.cpp, `--main` (each replica's first stage runs its
/// llama-server), no replicas or more than [`crate::serving::MAX_REPLICA_MACHINES`], a replica whose users are not its plan's
/// slots, a machine in two replicas, or what [`super::export`] refuses in a replica's plan.
pub fn replicas(replicas: &[ReplicaPlan], target: Target, options: &ExportOptions) -> Result<Export, ExportError> {
    if target != Target::LlamaCpp {
        return Err(ExportError::Option {
            option: "--to",
            value: target.name().to_owned(),
            problem: "cannot run these replicas: they were planned and simulated as llama-servers; export them with `--to llama.cpp`",
        });
    }
    if let Some(main) = &options.main {
        return Err(ExportError::Option {
            option: "--main",
            value: main.clone(),
            problem: "does not apply to replicas: each runs its llama-server on its first stage's machine; drop `--main`",
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
        let layout = Layout::new(&replica.plan, options)?;
        if u64::from(replica.users) != replica.plan.workload.batch || replica.users == 0 {
            return invalid(format!(
                "[{i}].users is {}, and its plan has {} slots (`workload.batch`); export what `stageplan plan` printed",
                replica.users, replica.plan.workload.batch
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
        let (mut export, replica_notes, launches) = llama_cpp::export(&layout)?;
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
        let _ = writeln!(
            text,
            "# ==== Replica {} of {}: {}, {} {} (a slot each) ====",
            i + 1,
            replicas.len(),
            names.join(", "),
            replica.users,
            if replica.users == 1 { "user" } else { "users" }
        );
        text.push_str(&export);
        text.push('\n');
        machines.extend(names);
        servers.push((layout.host_with(layout.main(), REPLICA_PORT), replica.users));
        for note in replica_notes {
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    let _ = writeln!(
        text,
        "# ==== The balancer: nginx, in its `http` block, on any machine that reaches them all ====\n\
         # Each request goes to the replica with the fewest in flight for its weight, its users:\n\
         # every replica keeps its planned share. Clients use this machine's port {BALANCER_PORT}."
    );
    text.push_str("upstream stageplan {\n    least_conn;\n");
    for (address, users) in &servers {
        let _ = writeln!(text, "    server {address} weight={users};");
    }
    let _ = write!(
        text,
        "}}\nserver {{\n    listen {BALANCER_PORT};\n    location / {{\n        proxy_pass http://stageplan;\n        \
         proxy_buffering off;\n        proxy_read_timeout 1h;\n    }}\n}}\n"
    );
    notes.push(format!(
        "Each llama-server listens on port {REPLICA_PORT} of every interface for the balancer, and has no authentication: keep it on a network only the balancer reaches, or add `--api-key`."
    ));
    Ok(Export { target, file_name: target.file_name().to_owned(), text, notes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::{Percentile, Targets};

    /// Two GPUs that each hold a 1B model: the answer splits them into two replicas.
    fn two_replicas() -> Vec<ReplicaPlan> {
        let json = r#"{"model": {"preset": "llama-3.2-1b", "weights": "q8_0"},
            "workload": {"context": 4096, "prompt": 128, "response": 64},
            "nodes": [{"name": "gpu", "device": "rtx-3060-12gb"}, {"name": "twin", "device": "rtx-3060-12gb"}]}"#;
        let problem = crate::check(json, crate::check::no_model_files).unwrap().problem;
        let targets = Targets { ttft_s: None, tpot_s: Some(0.02), percentile: Percentile::P95 };
        let answer = crate::serving::answer(&problem, None, Some(targets)).unwrap();
        let split = answer.replicas.expect("two replicas");
        split.replicas.into_iter().map(|r| ReplicaPlan { users: r.users, plan: r.plan }).collect()
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
    }
}
