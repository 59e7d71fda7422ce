//! `stageplan-guard --parent PID -- PROGRAM [ARGS…]`: runs PROGRAM in this process's group
//! and kills the group when process PID, which started the guard, is gone (see
//! `stageplan_agent::guard`).

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new("--parent")) {
        return usage();
    }
    let Some(parent) = args.next().and_then(|p| p.to_str()?.parse::<u32>().ok()) else { return usage() };
    if args.next().as_deref() != Some(std::ffi::OsStr::new("--")) {
        return usage();
    }
    let Some(program) = args.next() else { return usage() };
    stageplan_agent::guard::run(parent, &program, args)
}

#[allow(clippy::print_stderr)]
fn usage() -> std::process::ExitCode {
    eprintln!("usage: stageplan-guard --parent PID -- PROGRAM [ARGS…]");
    std::process::ExitCode::from(2)
}
