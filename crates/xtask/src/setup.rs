//! What the tests and the web build need, installed once per machine and skipped when
//! present: Debian packages, the toolchains and tools, the Python environment, llama.cpp.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{WASM_TARGET, cache, output, root, step};

pub(crate) const CARGO_FUZZ: &str = "0.13.2";

pub(crate) const TRUNK: &str = "0.21.14";

/// The nightly toolchain for cargo-fuzz and for the shipped wasm (see [`smallest_wasm`]),
/// pinned so a rebuild is the same build.
pub(crate) const NIGHTLY: &str = "nightly-2026-05-19";

/// Must equal the `wasm-bindgen` version in Cargo.lock.
pub(crate) const WASM_BINDGEN: &str = "0.2.130";

/// Debian packages: Mesa's software Vulkan/GL (lavapipe, llvmpipe) for the GPU tests,
/// Chromium with its driver for the browser tests, etcd for the state-store tests (and
/// openssl for the certificates of its TLS test), Prometheus for the closed loop's, and a
/// C++ toolchain with cmake for llama.cpp.
pub(crate) const APT_PACKAGES: [&str; 9] = [
    "mesa-vulkan-drivers",
    "libvulkan1",
    "chromium",
    "chromium-driver",
    "etcd-server",
    "openssl",
    "prometheus",
    "cmake",
    "build-essential",
];

/// llama.cpp for the engine tests: the source the `llama-cpp-python` sdist on PyPI vendors
/// (llama.cpp 0c1e57098, ggml 0.25.3, RPC protocol 7), pinned by version and hash.
pub(crate) const LLAMA_CPP_PYTHON: &str = "0.3.36";

pub(crate) const LLAMA_CPP_SHA256: &str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e";

/// What the tests run: the server, the RPC server, the quantizer, the benchmark, and
/// `--fit`'s own projection (`llama-fit-params`) to compare the `llama-fit` baseline with.
pub(crate) const LLAMA_CPP_TARGETS: [&str; 5] =
    ["llama-server", "ggml-rpc-server", "llama-quantize", "llama-bench", "llama-fit-params"];

pub(crate) const LLAMA_CPP_CMAKE: [&str; 9] = [
    // `-march=native` without AMX: a virtual machine may report AMX tiles that it does not
    // run (a Sapphire Rapids guest: llama-bench's Q8_0 prompt died on `tileloadd` with
    // SIGILL). GCC keeps ISA flags given explicitly over what `-march` implies.
    "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "-DGGML_RPC=ON",
    "-DLLAMA_CURL=OFF",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
];

/// Installs what the tests need, skipping what is already there: Debian packages, the
/// wasm32 target, a Python environment with the reference model writers, cargo-fuzz,
/// wasm-bindgen's test runner. Returns the Python.
pub(crate) fn setup() -> Result<PathBuf, String> {
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
        let mut install = cargo_install();
        install.args(["cargo-fuzz", "--version", CARGO_FUZZ, "--locked"]);
        step("install cargo-fuzz", install)?;
    }
    Ok(python)
}

/// What building the web page needs: wasm32, the pinned nightly with `rust-src`, Trunk,
/// wasm-bindgen's CLI, and the npm tools (wasm-opt from binaryen, playwright-core) in
/// `node_modules`.
pub(crate) fn web_tools() -> Result<(), String> {
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
        let mut install = cargo_install();
        install.args(["wasm-bindgen-cli", "--version", WASM_BINDGEN]);
        step("install wasm-bindgen's CLI and test runner", install)?;
    }
    if !output("trunk", &["--version"]).unwrap_or_default().contains(TRUNK) {
        let mut install = cargo_install();
        install.args(["trunk", "--version", TRUNK, "--locked"]);
        step("install Trunk", install)?;
    }
    let lock = root().join("package-lock.json");
    let stamp = root().join("node_modules/.stageplan-lock");
    let wanted = std::fs::read_to_string(&lock).map_err(|e| format!("{}: {e}", lock.display()))?;
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        let mut ci = Command::new("npm");
        ci.args(["ci", "--no-audit", "--no-fund"]).current_dir(root());
        step("install wasm-opt, playwright-core, axe-core, typescript and terser from npm", ci)?;
        std::fs::write(&stamp, wanted).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `cargo install` for the tools the tests run, built for build time rather than speed:
/// Trunk's own release profile asks for fat LTO in one codegen unit, which made its install
/// the longest step of a cold run (15 minutes beside other builds on 2 cores). The tools
/// spend their time waiting on rustc, wasm-opt and browsers, so plain optimisation serves.
fn cargo_install() -> Command {
    let mut install = Command::new("cargo");
    install
        .arg("install")
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false");
    install
}

/// PATH with the npm tools and cargo's installed binaries first, as Trunk needs.
pub(crate) fn tool_path() -> std::ffi::OsString {
    let mut paths = vec![root().join("node_modules/.bin")];
    if let Some(home) = std::env::var_os("HOME") {
        paths.push(PathBuf::from(home).join(".cargo/bin"));
    }
    paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(paths).unwrap_or_default()
}

/// llama.cpp built from the pinned sdist's vendored source, once per machine (about six
/// minutes on two cores): returns its `bin` directory.
pub(crate) fn llama_cpp(python: &Path) -> Result<PathBuf, String> {
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
    let jobs = std::thread::available_parallelism().map_or(2, std::num::NonZero::get).to_string();
    let mut compile = Command::new("cmake");
    compile.arg("--build").arg(&build).args(["-j", &jobs, "--target"]).args(LLAMA_CPP_TARGETS);
    step("build llama.cpp (once per machine)", compile)?;
    std::fs::write(&stamp, recipe).map_err(|e| e.to_string())?;
    Ok(bin)
}

/// A virtual environment with the pinned packages of `tests/fixtures/requirements.txt`.
pub(crate) fn python_env() -> Result<PathBuf, String> {
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
