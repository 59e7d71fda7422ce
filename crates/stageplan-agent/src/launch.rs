//! An export's launch as a process the supervisor runs, and as the record the machine that
//! serves a replica publishes for the others ([`Published`]): only that machine reads the
//! model file and plans; the others start what it published for them.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use serde::{Deserialize, Serialize};
use stageplan::export::{Launch, RPC_SERVER, Word};

use crate::{Ready, Spec};

/// llama-server's program name in a launch.
pub const SERVER: &str = "llama-server";

/// A launch as a record: its machine, program, environment and arguments (`None`: this
/// machine's cores, as the export's `$(nproc)`), and for an rpc-server the address
/// llama-server dials.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Published {
    pub machine: String,
    pub program: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
    pub args: Vec<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialed: Option<String>,
}

impl From<&Launch> for Published {
    fn from(launch: &Launch) -> Published {
        Published {
            machine: launch.machine.clone(),
            program: launch.program.to_owned(),
            env: launch.env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
            args: launch.args.iter().map(|w| if *w == Word::Cores { None } else { Some(w.arg(0)) }).collect(),
            dialed: launch.dialed.clone(),
        }
    }
}

/// `launch` as a process: its program from the engine folder `engine`, its words as
/// arguments (`cores`: this machine's), llama-server told to listen at `server` (by its
/// environment, so the arguments stay the export's) and serving once `/health` says so; an
/// rpc-server once its port accepts connections.
///
/// # Errors
/// The engine folder lacks the program, or an rpc-server's launch names no port.
pub fn spec(launch: &Launch, engine: &Path, cores: usize, server: SocketAddr) -> Result<Spec, String> {
    published_spec(&Published::from(launch), engine, cores, server)
}

/// A published launch as a process, as [`spec`] makes one. Only llama-server and the RPC
/// server are started: a record naming anything else is refused.
///
/// # Errors
/// Another program, the engine folder lacks the program, or an rpc-server names no port.
pub fn published_spec(launch: &Published, engine: &Path, cores: usize, server: SocketAddr) -> Result<Spec, String> {
    if launch.program != SERVER && launch.program != RPC_SERVER {
        return Err(format!(
            "a launch names `{}`; the agent starts `{SERVER}` and `{RPC_SERVER}` only",
            stageplan::quote::line(&launch.program)
        ));
    }
    let program = engine.join(&launch.program);
    if !program.is_file() {
        return Err(format!(
            "{} has no `{}`; give the folder of llama.cpp's binaries (its build's `bin`)",
            engine.display(),
            launch.program
        ));
    }
    let args: Vec<String> = launch.args.iter().map(|a| a.clone().unwrap_or_else(|| cores.to_string())).collect();
    let mut env = launch.env.clone();
    let ready = if launch.program == SERVER {
        env.extend([
            ("LLAMA_ARG_HOST".to_owned(), server.ip().to_string()),
            ("LLAMA_ARG_PORT".to_owned(), server.port().to_string()),
            // The buffers it allocates are logged at this verbosity.
            ("LLAMA_ARG_LOG_VERBOSITY".to_owned(), "5".to_owned()),
            // Its own counters at `/metrics`, which the agent's `/metrics` passes on.
            ("LLAMA_ARG_ENDPOINT_METRICS".to_owned(), "1".to_owned()),
        ]);
        Ready::Http { address: server, path: "/health".to_owned() }
    } else {
        let port = args
            .iter()
            .position(|a| a == "--port")
            .and_then(|at| args.get(at + 1)?.parse::<u16>().ok())
            .ok_or_else(|| format!("the export's `{}` has no `--port`", launch.program))?;
        Ready::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    };
    Ok(Spec { program, args, env, ready })
}
