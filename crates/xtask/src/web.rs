//! The web planner and the JS embed: building them with Trunk and wasm-bindgen, and serving
//! the planner on 127.0.0.1 with the headers the page and its worker expect.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::artifacts::{copy_tree, optimise, set_integrity};
use crate::{
    WASM_TARGET, parts, root,
    setup::{NIGHTLY, tool_path, web_tools},
    step, target_dir,
};

/// Builds `dist/` with Trunk (release, size-optimised, [`smallest_wasm`]), then pins the page's
/// Content-Security-Policy to the hash of Trunk's inline loader script.
pub(crate) fn build_web() -> Result<PathBuf, String> {
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
    parts::page(&dist)?;
    minify_glue(&dist)?;
    pin_inline_script(&dist.join("index.html"))?;
    Ok(dist)
}

/// Minifies wasm-bindgen's glue for the page and its worker with terser (Trunk's own JS
/// minifier cannot parse it; 6.7 → 5.2 KB gzip for the page's), and writes the page glue's
/// new SHA-384 into the `integrity` of the tag Trunk wrote for it.
fn minify_glue(dist: &Path) -> Result<(), String> {
    for script in ["stageplan-web.js", "stageplan-worker.js"] {
        let file = dist.join(script);
        let mut minify = Command::new("terser");
        minify.arg(&file).args(["--module", "--compress", "--mangle", "--output"]).arg(&file).env("PATH", tool_path());
        step(&format!("minify {script}"), minify)?;
    }
    let index = dist.join("index.html");
    let html = std::fs::read_to_string(&index).map_err(|e| format!("{}: {e}", index.display()))?;
    let glue = std::fs::read(dist.join("stageplan-web.js")).map_err(|e| e.to_string())?;
    std::fs::write(&index, set_integrity(&html, "/stageplan-web.js", &glue)?).map_err(|e| e.to_string())
}

/// Replaces `'unsafe-inline'` in the CSP's `script-src` by the SHA-256 of the one inline
/// script Trunk writes (the wasm loader), so no other inline script can run.
pub(crate) fn pin_inline_script(index: &Path) -> Result<(), String> {
    use base64::Engine;
    use sha2::Digest;
    let html = std::fs::read_to_string(index).map_err(|e| format!("{}: {e}", index.display()))?;
    // Trunk's minifier drops the quotes: `<script type=module>`.
    let (at, open) = ["<script type=\"module\">", "<script type=module>"]
        .iter()
        .find_map(|open| html.find(open).map(|at| (at, *open)))
        .ok_or("dist/index.html has no inline module script")?;
    let start = at + open.len();
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

/// Builds the embed package into `dist/embed/`: the browser module (`stageplan.js`,
/// wasm-bindgen's web target: the API and what `stage-plan.js` draws from), the second
/// module (`more/`: model files, re-planning, model summaries, loaded only where a page uses
/// them), the Node API (`node/`, both), the element (`stage-plan.js`, `.css`), `package.json` and the example page. Run
/// after `build_web`, which empties `dist/`.
pub(crate) fn build_embed() -> Result<PathBuf, String> {
    let out = root().join("dist/embed");
    let _ = std::fs::remove_dir_all(&out);
    let wasm = target_dir().join(WASM_TARGET).join("wasm-release/stageplan_js.wasm");
    let builds: [(&str, &[(&str, PathBuf)]); 3] = [
        ("api", &[("web", out.clone())]),
        ("more", &[("web", out.join("more"))]),
        ("api,more", &[("nodejs", out.join("node"))]),
    ];
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
            // The widget's module keeps its names for the split, which reads them.
            let split = feature == "api";
            optimise(&module, split, &format!("wasm-opt ({feature}, {bindgen_target})"))?;
            if split {
                parts::widget(dir)?;
            }
        }
    }
    // wasm-bindgen's Node glue is CommonJS; the package itself is ES modules.
    std::fs::write(out.join("node/package.json"), "{\"type\": \"commonjs\"}\n").map_err(|e| e.to_string())?;
    copy_tree(&root().join("web/embed"), &out)?;
    // What a reader's browser downloads, minified (terser, pinned in package.json): the
    // element and the browser glue, 7.3 → 4.7 KB gzip. Node's glue stays as written.
    for script in ["stage-plan.js", "stageplan.js", "more/stageplan.js"] {
        let file = out.join(script);
        let mut minify = Command::new("terser");
        minify.arg(&file).args(["--module", "--compress", "--mangle", "--output"]).arg(&file).env("PATH", tool_path());
        step(&format!("minify {script}"), minify)?;
    }
    Ok(out)
}

/// Makes the `cargo` a command runs (itself, or Trunk's) build the smallest wasm: the pinned
/// nightly rebuilds the standard library for size (`build-std`, `optimize_for_size`), a
/// panic aborts at once instead of formatting a message nobody reads (`immediate-abort`),
/// panics carry no source locations, and Leptos erases component types
/// (`erase_components`). Together: 398 → 326 KB gzip for the page's wasm, 227 → 199 KB for
/// the widget's. Stable builds (tests, `cargo build`) stay as they are, apart from
/// `erase_components`, which `.cargo/config.toml` sets for every wasm32 build.
pub(crate) fn smallest_wasm(command: &mut Command) {
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

/// Builds the web planner and serves `dist/` on 127.0.0.1 until interrupted.
pub(crate) fn serve(port: u16) -> Result<(), String> {
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
pub(crate) const WORKER_CSP: &str = include_str!("../../../web/worker-csp.txt");

/// Answers one HTTP/1.1 GET with a file from `dist` (or 404).
pub(crate) fn respond(mut stream: std::net::TcpStream, dist: &Path) {
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
