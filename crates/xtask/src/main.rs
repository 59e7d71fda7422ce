//! Project automation, run as `cargo xtask <task>`.
//!
//! - `cargo xtask test`: installs what the tests need (skipping what is already there), then
//!   runs every test: formatting, lints, unit and property tests, import tests against the
//!   reference writers, the CLI fixtures, the core built for `wasm32-unknown-unknown`, the
//!   web planner and the embed widget in headless Chromium, the JS API on Node, and each
//!   fuzz target for a bounded time.
//! - `cargo xtask fuzz [SECONDS]`: only the fuzz targets, each for SECONDS (default 60).
//! - `cargo xtask gpu`: on a machine with a GPU, in one run: build, check the kernels on
//!   every adapter, probe them, time the kernels against the CPU, and run a plan sharded
//!   across the local devices with predicted against measured stage times.
//! - `cargo xtask serve`: builds the web planner and serves it on 127.0.0.1, printing its URL.
//! - `cargo xtask embed`: builds the JS package and `<stage-plan>` widget into `dist/embed/`.
//! - `cargo xtask plan [SCENARIO]`: plans a scenario with the CLI (the example by default).
//! - `cargo xtask bench`: the criterion benchmarks, then plan quality — the `optimal`
//!   policy beside the baselines — for every scenario under `tests/scenarios/`, as the
//!   Markdown tables `BENCHMARKS.md` quotes.
//!
//! Every step prints its command and how long it took, so a slow or failing step is easy
//! to find in a CI log.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod calibrate;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

const WASM_TARGET: &str = "wasm32-unknown-unknown";
const EXAMPLE: &str = "tests/scenarios/home-70b.json";
const CARGO_FUZZ: &str = "0.13.2";
const TRUNK: &str = "0.21.14";
/// The nightly toolchain for cargo-fuzz and for the shipped wasm (see [`smallest_wasm`]),
/// pinned so a rebuild is the same build.
const NIGHTLY: &str = "nightly-2026-05-19";
/// Must equal the `wasm-bindgen` version in Cargo.lock.
const WASM_BINDGEN: &str = "0.2.130";
/// Debian packages: Mesa's software Vulkan/GL (lavapipe, llvmpipe) for the GPU tests,
/// Chromium with its driver for the browser tests, etcd for the state-store tests, and a
/// C++ toolchain with cmake for llama.cpp.
const APT_PACKAGES: [&str; 7] =
    ["mesa-vulkan-drivers", "libvulkan1", "chromium", "chromium-driver", "etcd-server", "cmake", "build-essential"];
/// llama.cpp for the engine tests: the source the `llama-cpp-python` sdist on PyPI vendors
/// (llama.cpp 0c1e57098, ggml 0.25.3, RPC protocol 7), pinned by version and hash.
const LLAMA_CPP_PYTHON: &str = "0.3.36";
const LLAMA_CPP_SHA256: &str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e";
/// What the tests run: the server, the RPC server, the quantizer, the benchmark.
const LLAMA_CPP_TARGETS: [&str; 4] = ["llama-server", "ggml-rpc-server", "llama-quantize", "llama-bench"];
const LLAMA_CPP_CMAKE: [&str; 7] = [
    "-DGGML_RPC=ON",
    "-DLLAMA_CURL=OFF",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
];
const FUZZ_TARGETS: [&str; 8] =
    ["gguf_header", "safetensors_header", "scenario", "replan", "export", "export_text", "redb_store", "llama_bench"];
/// Seconds each fuzz target runs in `cargo xtask test`.
const FUZZ_SECONDS_IN_TEST: u64 = 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("serve") => serve(args.get(1).and_then(|p| p.parse().ok()).unwrap_or(8080)),
        Some("plan") => plan(args.get(1).map_or(EXAMPLE, String::as_str)),
        Some("bench") => bench(),
        Some("calibrate") => calibrate::calibrate(&root()),
        Some("quality") => quality().map(|table| println!("{table}")),
        Some("gpu") => gpu(),
        Some("embed") => {
            web_tools().and_then(|()| build_embed()).map(|out| println!("embed package: {}", out.display()))
        }
        Some("fuzz") => {
            let seconds = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
            setup().and_then(|python| fuzz(&python, seconds))
        }
        _ => {
            eprintln!(
                "usage: cargo xtask test | serve [PORT] | plan [SCENARIO] | bench | quality | calibrate | fuzz [SECONDS] | gpu | embed"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(root());
    command
}

/// Runs a command, echoing it and its duration; fails on a non-zero exit.
fn step(title: &str, mut command: Command) -> Result<(), String> {
    println!("==> {title}: {}", describe(&command));
    let started = Instant::now();
    let status = command.status().map_err(|e| format!("{title}: cannot start: {e}"))?;
    println!("    {title}: {:.1} s", started.elapsed().as_secs_f64());
    if status.success() { Ok(()) } else { Err(format!("{title} failed ({status})")) }
}

fn describe(command: &Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    words.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Where installed tools live between runs: outside the clone.
fn cache() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache/stageplan")
}

/// Installs what the tests need, skipping what is already there: Debian packages, the
/// wasm32 target, a Python environment with the reference model writers, cargo-fuzz,
/// wasm-bindgen's test runner. Returns the Python.
fn setup() -> Result<PathBuf, String> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            !output("dpkg-query", &["-W", "-f=${Status}", p]).is_some_and(|s| s.contains("install ok installed"))
        })
        .collect();
    if !missing.is_empty() {
        let root = output("id", &["-u"]).is_some_and(|id| id.trim() == "0");
        let mut update = Command::new(if root { "apt-get" } else { "sudo" });
        if !root {
            update.arg("apt-get");
        }
        update.arg("update");
        step("refresh the Debian package lists", update)?;
        let mut install = Command::new(if root { "apt-get" } else { "sudo" });
        if !root {
            install.arg("apt-get");
        }
        install.args(["install", "-y"]).args(&missing).env("DEBIAN_FRONTEND", "noninteractive");
        step("install Debian packages", install)?;
    }
    let python = python_env()?;
    web_tools()?;
    let fuzz_version = output("cargo", &["fuzz", "--version"]).unwrap_or_default();
    if !fuzz_version.contains(CARGO_FUZZ) {
        let mut install = Command::new("cargo");
        install.args(["install", "cargo-fuzz", "--version", CARGO_FUZZ, "--locked"]);
        step("install cargo-fuzz", install)?;
    }
    Ok(python)
}

/// What building the web page needs: wasm32, the pinned nightly with `rust-src`, Trunk,
/// wasm-bindgen's CLI, and the npm tools (wasm-opt from binaryen, playwright-core) in
/// `node_modules`.
fn web_tools() -> Result<(), String> {
    let installed = output("rustup", &["target", "list", "--installed"]).unwrap_or_default();
    if !installed.lines().any(|t| t.trim() == WASM_TARGET) {
        let mut add = Command::new("rustup");
        add.args(["target", "add", WASM_TARGET]);
        step("install the wasm32 target", add)?;
    }
    let components = output("rustup", &["component", "list", "--installed", "--toolchain", NIGHTLY]);
    if !components.unwrap_or_default().lines().any(|c| c.starts_with("rust-src")) {
        let mut install = Command::new("rustup");
        install.args(["toolchain", "install", NIGHTLY, "--profile", "minimal", "--component", "rust-src"]);
        step("install the pinned nightly toolchain with the standard library's source", install)?;
    }
    let bindgen = output("wasm-bindgen", &["--version"]).unwrap_or_default();
    if !bindgen.contains(WASM_BINDGEN) {
        // Not `--locked`: its lockfile names a crate version the registry mirror lacks.
        let mut install = Command::new("cargo");
        install.args(["install", "wasm-bindgen-cli", "--version", WASM_BINDGEN]);
        step("install wasm-bindgen's CLI and test runner", install)?;
    }
    if !output("trunk", &["--version"]).unwrap_or_default().contains(TRUNK) {
        let mut install = Command::new("cargo");
        install.args(["install", "trunk", "--version", TRUNK, "--locked"]);
        step("install Trunk", install)?;
    }
    let lock = root().join("package-lock.json");
    let stamp = root().join("node_modules/.stageplan-lock");
    let wanted = std::fs::read_to_string(&lock).map_err(|e| format!("{}: {e}", lock.display()))?;
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        let mut ci = Command::new("npm");
        ci.args(["ci", "--no-audit", "--no-fund"]).current_dir(root());
        step("install wasm-opt and playwright-core from npm", ci)?;
        std::fs::write(&stamp, wanted).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// PATH with the npm tools and cargo's installed binaries first, as Trunk needs.
fn tool_path() -> std::ffi::OsString {
    let mut paths = vec![root().join("node_modules/.bin")];
    if let Some(home) = std::env::var_os("HOME") {
        paths.push(PathBuf::from(home).join(".cargo/bin"));
    }
    paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(paths).unwrap_or_default()
}

/// Builds `dist/` with Trunk (release, size-optimised, [`smallest_wasm`]), then pins the page's
/// Content-Security-Policy to the hash of Trunk's inline loader script.
fn build_web() -> Result<PathBuf, String> {
    // With the size build's settings, so the standard library's own dependencies
    // (`build-std`) are fetched too.
    let mut fetch = Command::new("cargo");
    fetch.current_dir(root()).args(["fetch", "--locked", "--target", WASM_TARGET]);
    smallest_wasm(&mut fetch);
    step("fetch crates for the offline Trunk build", fetch)?;
    let mut trunk = Command::new("trunk");
    trunk.args(["build", "--release", "true", "--skip-version-check"]).current_dir(root()).env("PATH", tool_path());
    smallest_wasm(&mut trunk);
    step("build the web planner (Trunk)", trunk)?;
    let dist = root().join("dist");
    pin_inline_script(&dist.join("index.html"))?;
    Ok(dist)
}

/// Replaces `'unsafe-inline'` in the CSP's `script-src` by the SHA-256 of the one inline
/// script Trunk writes (the wasm loader), so no other inline script can run.
fn pin_inline_script(index: &Path) -> Result<(), String> {
    use base64::Engine;
    use sha2::Digest;
    let html = std::fs::read_to_string(index).map_err(|e| format!("{}: {e}", index.display()))?;
    let open = "<script type=\"module\">";
    let start = html.find(open).ok_or("dist/index.html has no inline module script")? + open.len();
    let end = start + html[start..].find("</script>").ok_or("the inline script does not end")?;
    let digest = sha2::Sha256::digest(&html.as_bytes()[start..end]);
    let hash = base64::engine::general_purpose::STANDARD.encode(digest);
    let marker = "script-src 'self' 'wasm-unsafe-eval' 'unsafe-inline'";
    if !html.contains(marker) {
        return Err("index.html's Content-Security-Policy no longer has the expected script-src".into());
    }
    let pinned = html.replace(marker, &format!("script-src 'self' 'wasm-unsafe-eval' 'sha256-{hash}'"));
    std::fs::write(index, pinned).map_err(|e| e.to_string())
}

/// Builds the embed package into `dist/embed/`: the browser API (`stageplan.js`,
/// wasm-bindgen's web target) and the Node API (`node/`) from one API-only build, the widget
/// alone (`widget/`, which `stage-plan.js` loads), the element (`stage-plan.js`, `.css`),
/// `package.json` and the example page. Run after `build_web`, which empties `dist/`.
fn build_embed() -> Result<PathBuf, String> {
    let out = root().join("dist/embed");
    let _ = std::fs::remove_dir_all(&out);
    let wasm = target_dir().join(WASM_TARGET).join("wasm-release/stageplan_js.wasm");
    let builds: [(&str, &[(&str, PathBuf)]); 2] =
        [("api", &[("web", out.clone()), ("nodejs", out.join("node"))]), ("widget", &[("web", out.join("widget"))])];
    for (feature, outputs) in builds {
        let mut build = Command::new("cargo");
        build.current_dir(root());
        smallest_wasm(&mut build);
        build.args([
            "build",
            "--package",
            "stageplan-js",
            "--profile",
            "wasm-release",
            "--target",
            WASM_TARGET,
            "--locked",
            "--no-default-features",
            "--features",
            feature,
        ]);
        step(&format!("build the JS package's wasm ({feature})"), build)?;
        for (bindgen_target, dir) in outputs {
            let mut bindgen = Command::new("wasm-bindgen");
            bindgen
                .args(["--target", bindgen_target, "--out-name", "stageplan", "--out-dir"])
                .arg(dir)
                .arg(&wasm)
                .env("PATH", tool_path());
            step(&format!("wasm-bindgen ({feature}, {bindgen_target})"), bindgen)?;
            let module = dir.join("stageplan_bg.wasm");
            let mut opt = Command::new("wasm-opt");
            opt.arg("-Oz").args(WASM_FEATURES).arg(&module).arg("-o").arg(&module).env("PATH", tool_path());
            step(&format!("wasm-opt ({feature}, {bindgen_target})"), opt)?;
        }
    }
    // wasm-bindgen's Node glue is CommonJS; the package itself is ES modules.
    std::fs::write(out.join("node/package.json"), "{\"type\": \"commonjs\"}\n").map_err(|e| e.to_string())?;
    // The widget's glue has no declarations worth shipping: `stage-plan.js` is its interface.
    let _ = std::fs::remove_file(out.join("widget/stageplan.d.ts"));
    let _ = std::fs::remove_file(out.join("widget/stageplan_bg.wasm.d.ts"));
    copy_tree(&root().join("web/embed"), &out)?;
    Ok(out)
}

/// Makes the `cargo` a command runs (itself, or Trunk's) build the smallest wasm: the pinned
/// nightly rebuilds the standard library for size (`build-std`, `optimize_for_size`), a
/// panic aborts at once instead of formatting a message nobody reads (`immediate-abort`),
/// panics carry no source locations, and Leptos erases component types
/// (`erase_components`). Together: 398 → 326 KB gzip for the page's wasm, 227 → 199 KB for
/// the widget's. Stable builds (tests, `cargo build`) stay as they are, apart from
/// `erase_components`, which `.cargo/config.toml` sets for every wasm32 build.
fn smallest_wasm(command: &mut Command) {
    command
        // rustup's `cargo` proxy, which picks the toolchain from RUSTUP_TOOLCHAIN.
        .env("PATH", tool_path())
        .env("RUSTUP_TOOLCHAIN", NIGHTLY)
        .env_remove("CARGO")
        .env_remove("RUSTC")
        // Either would silently replace the target flags below.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("CARGO_UNSTABLE_BUILD_STD", "std,panic_abort")
        .env("CARGO_UNSTABLE_BUILD_STD_FEATURES", "optimize_for_size")
        .env(
            "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS",
            "--cfg erase_components -Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none",
        );
}

/// WebAssembly features rustc's wasm32 target emits, which wasm-opt must accept.
const WASM_FEATURES: [&str; 6] = [
    "--enable-bulk-memory",
    "--enable-mutable-globals",
    "--enable-nontrapping-float-to-int",
    "--enable-sign-ext",
    "--enable-reference-types",
    "--enable-multivalue",
];

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?.flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target)?;
        } else {
            std::fs::copy(&path, &target).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Builds the web planner and serves `dist/` on 127.0.0.1 until interrupted.
fn serve(port: u16) -> Result<(), String> {
    web_tools()?;
    let dist = build_web()?;
    build_embed()?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("port {port}: {e}; try `cargo xtask serve 8081`"))?;
    println!("\nstageplan web planner: http://127.0.0.1:{port}/  (Ctrl-C to stop)");
    println!("embed example (the <stage-plan> widget): http://127.0.0.1:{port}/embed/index.html");
    for stream in listener.incoming().flatten() {
        let dist = dist.clone();
        std::thread::spawn(move || respond(stream, &dist));
    }
    Ok(())
}

/// The worker's own Content-Security-Policy, sent with its script (a page's `<meta>` policy
/// does not reach a worker): it may import its glue, compile its wasm and fetch its files.
/// One file, read by this server and by the browser tests' (`tests/e2e/harness.mjs`).
const WORKER_CSP: &str = include_str!("../../../web/worker-csp.txt");

/// Answers one HTTP/1.1 GET with a file from `dist` (or 404).
fn respond(mut stream: std::net::TcpStream, dist: &Path) {
    use std::io::{BufRead, BufReader, Write};
    let mut line = String::new();
    if BufReader::new(&stream).read_line(&mut line).is_err() {
        return;
    }
    let target = line.split_whitespace().nth(1).unwrap_or("/");
    let path = target.split(['?', '#']).next().unwrap_or("/");
    let relative = if path == "/" { "index.html" } else { path.trim_start_matches('/') };
    let file = dist.join(relative);
    let inside = file.canonicalize().ok().zip(dist.canonicalize().ok()).is_some_and(|(f, d)| f.starts_with(d));
    let (status, body, kind) = match std::fs::read(&file) {
        Ok(body) if inside && !relative.contains("..") => {
            let kind = match file.extension().and_then(|e| e.to_str()) {
                Some("html") => "text/html; charset=utf-8",
                Some("js") => "text/javascript",
                Some("wasm") => "application/wasm",
                Some("css") => "text/css",
                Some("json") => "application/json",
                _ => "application/octet-stream",
            };
            ("200 OK", body, kind)
        }
        _ => ("404 Not Found", b"not found".to_vec(), "text/plain"),
    };
    let policy = if relative.starts_with("stageplan-worker") && relative.ends_with(".js") {
        format!("content-security-policy: {}\r\n", WORKER_CSP.trim())
    } else {
        String::new()
    };
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n{policy}connection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body));
}

/// llama.cpp built from the pinned sdist's vendored source, once per machine (about six
/// minutes on two cores): returns its `bin` directory.
fn llama_cpp(python: &Path) -> Result<PathBuf, String> {
    let dir = cache().join("llama.cpp").join(LLAMA_CPP_PYTHON);
    let build = dir.join("build");
    let bin = build.join("bin");
    let recipe = format!("{LLAMA_CPP_SHA256}\n{}\n{}\n", LLAMA_CPP_CMAKE.join(" "), LLAMA_CPP_TARGETS.join(" "));
    let stamp = build.join("stageplan-recipe");
    let built = LLAMA_CPP_TARGETS.iter().all(|t| bin.join(t).exists());
    if built && std::fs::read_to_string(&stamp).is_ok_and(|have| have == recipe) {
        return Ok(bin);
    }
    let archive = dir.join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"));
    let hash = |path: &Path| {
        output("sha256sum", &[&path.to_string_lossy()]).and_then(|s| s.split_whitespace().next().map(str::to_owned))
    };
    if hash(&archive).as_deref() != Some(LLAMA_CPP_SHA256) {
        let mut download = Command::new(python);
        download
            .args(["-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-binary"])
            .args(["llama-cpp-python", "--no-deps", &format!("llama-cpp-python=={LLAMA_CPP_PYTHON}"), "-d"])
            .arg(&dir);
        step("download llama.cpp's source (llama-cpp-python sdist)", download)?;
        let got = hash(&archive);
        if got.as_deref() != Some(LLAMA_CPP_SHA256) {
            return Err(format!("{}: sha256 {got:?}, expected {LLAMA_CPP_SHA256}", archive.display()));
        }
    }
    let source = dir.join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}"));
    if !source.join("vendor/llama.cpp/CMakeLists.txt").exists() {
        let mut unpack = Command::new("tar");
        unpack.arg("-xzf").arg(&archive).arg("-C").arg(&dir);
        step("unpack llama.cpp", unpack)?;
    }
    let mut configure = Command::new("cmake");
    configure.arg("-S").arg(source.join("vendor/llama.cpp")).arg("-B").arg(&build).args(LLAMA_CPP_CMAKE);
    step("configure llama.cpp", configure)?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get()).to_string();
    let mut compile = Command::new("cmake");
    compile.arg("--build").arg(&build).args(["-j", &jobs, "--target"]).args(LLAMA_CPP_TARGETS);
    step("build llama.cpp (once per machine)", compile)?;
    std::fs::write(&stamp, recipe).map_err(|e| e.to_string())?;
    Ok(bin)
}

/// A virtual environment with the pinned packages of `tests/fixtures/requirements.txt`.
fn python_env() -> Result<PathBuf, String> {
    let venv = cache().join("python");
    let python = venv.join("bin/python3");
    let requirements = root().join("tests/fixtures/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).map_err(|e| format!("{}: {e}", requirements.display()))?;
    let stamp = venv.join("requirements.txt");
    if python.exists() && std::fs::read_to_string(&stamp).is_ok_and(|have| have == wanted) {
        return Ok(python);
    }
    let mut create = Command::new("python3");
    create.args(["-m", "venv"]).arg(&venv);
    step("create the Python environment", create)?;
    let mut install = Command::new(&python);
    install.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"]).arg(&requirements);
    step("install the reference model writers", install)?;
    std::fs::write(&stamp, wanted).map_err(|e| e.to_string())?;
    Ok(python)
}

fn test() -> Result<(), String> {
    let started = Instant::now();
    let python = setup()?;
    let llama_cpp = llama_cpp(&python)?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    step("formatting", fmt)?;
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]);
    step("lints", clippy)?;
    let mut docs = cargo();
    docs.args([
        "doc",
        "--no-deps",
        "--locked",
        "-p",
        "stageplan",
        "-p",
        "stageplan-store",
        "-p",
        "stageplan-gpu",
        "-p",
        "stageplan-cpu",
        "-p",
        "stageplan-reconcile",
    ])
    .env("RUSTDOCFLAGS", "-D warnings");
    step("API docs (rustdoc, broken links denied)", docs)?;
    let mut tests = cargo();
    tests
        .args(["test", "--workspace", "--locked"])
        .env("STAGEPLAN_PYTHON", &python)
        .env("STAGEPLAN_LLAMA_CPP", &llama_cpp)
        // The GPU tests must see lavapipe through Vulkan and llvmpipe through GL.
        .env("STAGEPLAN_EXPECT_LAVAPIPE", "1");
    quiet_mesa(&mut tests);
    step("unit, property, import, GPU (lavapipe), CLI and llama.cpp tests", tests)?;
    let mut browser = cargo();
    browser.args(["test", "--package", "stageplan-gpu", "--target", WASM_TARGET, "--locked"]);
    browser_env(&mut browser);
    step("GPU kernels in headless Chromium (WebGPU, SwiftShader)", browser)?;
    let mut wasm = cargo();
    wasm.args(["build", "--package", "stageplan", "--target", WASM_TARGET, "--locked"]);
    step("core for wasm32", wasm)?;
    let mut components = cargo();
    components.args(["test", "--package", "stageplan-web", "--target", WASM_TARGET, "--locked"]);
    browser_env(&mut components);
    step("web components in headless Chromium", components)?;
    let dist = build_web()?;
    let fixtures = cache().join("e2e-fixtures");
    let _ = std::fs::remove_dir_all(&fixtures);
    let mut write = Command::new(&python);
    write.arg(root().join("tests/fixtures/write_models.py")).arg(&fixtures);
    step("model files for the browser tests (reference writers)", write)?;
    let mut cli = cargo();
    cli.args(["build", "--package", "stageplan-cli", "--locked"]);
    step("the CLI the browser tests compare against", cli)?;
    let mut e2e = Command::new("node");
    e2e.arg(root().join("tests/e2e/planner.mjs"))
        .arg("--dist")
        .arg(&dist)
        .arg("--cli")
        .arg(target_dir().join("debug/stageplan"))
        .arg("--fixtures")
        .arg(&fixtures)
        .current_dir(root())
        .env("PATH", tool_path());
    step("the web planner end to end (playwright-core, headless Chromium)", e2e)?;
    let embed = build_embed()?;
    let mut node = Command::new("node");
    node.args(["--test", "tests/node/"])
        .current_dir(root())
        .env("STAGEPLAN_EMBED", &embed)
        .env("STAGEPLAN_CLI", target_dir().join("debug/stageplan"))
        .env("STAGEPLAN_FIXTURES", &fixtures);
    step("the JS API on Node against the CLI (node --test)", node)?;
    let mut types = Command::new("tsc");
    types.args(["-p", "tests/node"]).current_dir(root()).env("PATH", tool_path());
    step("the TypeScript declarations (tsc --strict)", types)?;
    let mut widgets = Command::new("node");
    widgets
        .arg(root().join("tests/e2e/embed.mjs"))
        .arg("--embed")
        .arg(&embed)
        .arg("--cli")
        .arg(target_dir().join("debug/stageplan"))
        .current_dir(root())
        .env("PATH", tool_path());
    step("the <stage-plan> example page end to end (headless Chromium)", widgets)?;
    let mut example = cargo();
    example.args(["run", "--quiet", "--package", "stageplan-cli", "--locked", "--", "plan", EXAMPLE]);
    step("the README's example plan", example)?;
    fuzz(&python, FUZZ_SECONDS_IN_TEST)?;
    println!("==> all tests passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Runs each fuzz target for `seconds`, seeded with files from the reference writers and
/// the scenarios under `tests/scenarios`; prints how many inputs each ran.
fn fuzz(python: &Path, seconds: u64) -> Result<(), String> {
    let work = cache().join("fuzz");
    let seeds = work.join("reference-files");
    let _ = std::fs::remove_dir_all(&seeds);
    let mut write = Command::new(python);
    write.arg(root().join("tests/fixtures/write_models.py")).arg(&seeds);
    step("fuzz seeds from the reference writers", write)?;
    for target in FUZZ_TARGETS {
        let corpus = work.join("corpus").join(target);
        std::fs::create_dir_all(&corpus).map_err(|e| e.to_string())?;
        seed_corpus(target, &seeds, &corpus)?;
        // cargo-fuzz needs the nightly toolchain; `rustup run` selects it.
        let mut run = Command::new("rustup");
        run.current_dir(root().join("crates/stageplan"))
            // No AddressSanitizer: the code under test forbids `unsafe`, and without ASan's
            // overhead each second reaches about five times more inputs.
            .args(["run", NIGHTLY, "cargo", "fuzz", "run", "--sanitizer", "none", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .args(["-max_len=131072", "-rss_limit_mb=2048", "-print_final_stats=1"]);
        // Tokens that reach the paths hostile input found (names, counts, layer indices).
        if let Some(dict) = fuzz_dictionary(target) {
            run.arg(format!("-dict={}", dict.display()));
        }
        step(&format!("fuzz {target} for {seconds} s"), run)?;
    }
    Ok(())
}

/// The libFuzzer dictionary for a target, under `crates/stageplan/fuzz/dicts/`.
fn fuzz_dictionary(target: &str) -> Option<PathBuf> {
    let name = match target {
        "gguf_header" => "gguf",
        "safetensors_header" => "safetensors",
        "scenario" | "replan" => "scenario",
        "export_text" => "export_text",
        _ => return None,
    };
    Some(root().join("crates/stageplan/fuzz/dicts").join(format!("{name}.dict")))
}

/// The first 128 KiB of each reference file (headers and some data) for the parsers; the
/// scenario files for the planner; a small store, written by `stageplan-store`'s
/// `sample_store` example, for the store reader.
fn seed_corpus(target: &str, seeds: &Path, corpus: &Path) -> Result<(), String> {
    if target == "export_text" {
        // Name, model, image and host, separated by zero bytes.
        let seeds = [
            "Llama 3.1 70B\0/models/llama.gguf\0registry.example.com/stage:1\x0010.0.0.1:50052",
            "x\nrm -rf ~ #\0$(id)",
        ];
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(corpus.join(format!("seed-{i}")), seed).map_err(|e| e.to_string())?;
        }
        return Ok(());
    }
    if target == "redb_store" {
        let file = seeds.join("sample.redb");
        let _ = std::fs::remove_file(&file);
        let mut write = cargo();
        write.args(["run", "--quiet", "--package", "stageplan-store", "--example", "sample_store", "--locked", "--"]);
        write.arg(&file);
        step("a sample store for the fuzz seed", write)?;
        // The target reads an input whose first byte is even as a whole file.
        let mut bytes = vec![0];
        bytes.extend(std::fs::read(&file).map_err(|e| e.to_string())?);
        return std::fs::write(corpus.join("seed-0"), bytes).map_err(|e| e.to_string());
    }
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack = vec![if matches!(target, "scenario" | "replan" | "llama_bench") {
        root().join("tests")
    } else {
        seeds.to_path_buf()
    }];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    let wanted = |p: &Path| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match target {
            "gguf_header" => name.ends_with(".gguf"),
            "safetensors_header" => name.ends_with(".safetensors") || name.ends_with(".index.json"),
            "replan" => name == "current.json",
            "llama_bench" => name == "results.json",
            _ => name.ends_with(".json") && p.to_string_lossy().contains("scenarios"),
        }
    };
    for (i, file) in files.iter().filter(|p| wanted(p)).enumerate() {
        let mut bytes = std::fs::read(file).map_err(|e| e.to_string())?;
        bytes.truncate(128 << 10);
        std::fs::write(corpus.join(format!("seed-{i}")), bytes).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Builds, checks, probes and times the kernels on this machine's adapters, then runs the
/// example plan sharded across them.
fn gpu() -> Result<(), String> {
    let mut build = cargo();
    build.args(["build", "--release", "--package", "stageplan-cli", "--locked"]);
    step("build the CLI", build)?;
    let mut tests = cargo();
    tests.args(["test", "--release", "--package", "stageplan-gpu", "--locked"]);
    quiet_mesa(&mut tests);
    step("kernels checked against the CPU on every adapter", tests)?;
    let stageplan = target_dir().join("release/stageplan");
    let mut probe = Command::new(&stageplan);
    probe.args(["probe", "--gpu"]);
    quiet_mesa(&mut probe);
    step("probe every adapter", probe)?;
    let mut kernels = cargo();
    kernels.args(["bench", "--package", "stageplan-gpu", "--bench", "kernels", "--locked"]);
    quiet_mesa(&mut kernels);
    step("kernel benchmarks against the CPU", kernels)?;
    let mut sharded = Command::new(&stageplan);
    sharded.args(["run-sharded", EXAMPLE, "--width", "1024", "--tokens", "256"]).current_dir(root());
    quiet_mesa(&mut sharded);
    step("the example plan, sharded across local devices", sharded)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Mesa complains on every start without a runtime directory; give it one.
fn quiet_mesa(command: &mut Command) {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        command.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
}

/// What `wasm-bindgen-test-runner` needs to drive Debian's Chromium with WebGPU on.
fn browser_env(command: &mut Command) {
    command
        .env("CHROMEDRIVER", "/usr/bin/chromedriver")
        .env("WASM_BINDGEN_TEST_WEBDRIVER_JSON", root().join("webdriver.json"))
        .env("WASM_BINDGEN_TEST_TIMEOUT", "180");
}

fn plan(scenario: &str) -> Result<(), String> {
    let mut run = cargo();
    run.args(["run", "--quiet", "--release", "--package", "stageplan-cli", "--", "plan", scenario]);
    step("plan", run)
}

fn bench() -> Result<(), String> {
    let python = setup()?;
    let mut criterion = cargo();
    criterion.args(["bench", "--package", "stageplan", "--package", "stageplan-reconcile", "--locked"]);
    step("planner, import and reconcile benchmarks", criterion)?;
    let mut kernels = cargo();
    kernels.args(["bench", "--package", "stageplan-gpu", "--bench", "kernels", "--locked"]);
    quiet_mesa(&mut kernels);
    step("GPU kernel benchmarks against the CPU", kernels)?;
    // The baseline for header import: the reference reader on the file the import bench wrote.
    let file = std::env::temp_dir().join("stageplan-bench-llama-100.gguf");
    let mut reference = Command::new(python);
    reference.arg("-c").arg(format!(
        "import timeit; from gguf import GGUFReader; n = 3; \
         t = timeit.timeit(lambda: GGUFReader({file:?}), number=n) / n; \
         print(f'gguf.GGUFReader on the same 100-layer file: {{t * 1e3:.0f}} ms')",
        file = file.display().to_string()
    ));
    step("reference GGUF reader", reference)?;
    println!("\n{}", quality()?);
    Ok(())
}

/// Tokens/s (throughput) and ms per token (latency) of every policy on every scenario.
fn quality() -> Result<String, String> {
    use stageplan::{Objective, Policy, Scenario};
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/scenarios"))
        .map_err(|e| format!("tests/scenarios: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut table = String::from(
        "| scenario | objective | optimal | memory-proportional | even | greedy | search |\n|---|---|---|---|---|---|---|\n",
    );
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let name = file.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        for objective in [Objective::Throughput, Objective::Latency] {
            let mut scenario = Scenario::from_json(&text).map_err(|e| format!("{name}: {e}"))?;
            scenario.objective = objective;
            scenario.policy = Policy::Optimal;
            let problem = scenario.problem().map_err(|e| format!("{name}: {e}"))?;
            let plan = stageplan::plan(&problem);
            let figure = |feasible: bool, tokens: f64, latency: Option<f64>| {
                if !feasible {
                    return "does not fit".to_owned();
                }
                match objective {
                    Objective::Throughput => format!("{} tok/s", stageplan::planner::sig3(tokens)),
                    Objective::Latency => latency.map_or_else(String::new, |l| format!("{:.2} ms", l * 1e3)),
                }
            };
            let baseline = |policy: Policy| {
                plan.baselines
                    .iter()
                    .find(|b| b.policy == policy)
                    .map_or_else(String::new, |b| figure(b.feasible, b.tokens_per_s, b.latency_s))
            };
            table.push_str(&format!(
                "| {name} | {} | **{}** | {} | {} | {} | {} |\n",
                objective.name(),
                figure(plan.feasible, plan.tokens_per_s, plan.latency_s),
                baseline(Policy::MemoryProportional),
                baseline(Policy::Even),
                baseline(Policy::Greedy),
                plan.search.method,
            ));
        }
    }
    Ok(table)
}
