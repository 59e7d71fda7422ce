//! An export's launch as a process the supervisor runs.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use stageplan::export::Launch;

use crate::{Ready, Spec};

/// llama-server's program name in a launch.
pub const SERVER: &str = "llama-server";

/// `launch` as a process: its program from the engine folder `engine`, its words as
/// arguments (`cores`: this machine's), llama-server told to listen at `server` (by its
/// environment, so the arguments stay the export's) and serving once `/health` says so; an
/// rpc-server once its port accepts connections.
///
/// # Errors
/// The engine folder lacks the program, or an rpc-server's launch names no port.
pub fn spec(launch: &Launch, engine: &Path, cores: usize, server: SocketAddr) -> Result<Spec, String> {
    let program = engine.join(launch.program);
    if !program.is_file() {
        return Err(format!(
            "{} has no `{}`; give the folder of llama.cpp's binaries (its build's `bin`)",
            engine.display(),
            launch.program
        ));
    }
    let args: Vec<String> = launch.args.iter().map(|w| w.arg(cores)).collect();
    let mut env: Vec<(String, String)> = launch.env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
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
        let port = launch.port().ok_or_else(|| format!("the export's `{}` has no `--port`", launch.program))?;
        Ready::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    };
    Ok(Spec { program, args, env, ready })
}
