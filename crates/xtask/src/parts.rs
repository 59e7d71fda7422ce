//! The widget's and the page's modules in two parts (`split.rs`), as their builds run: each
//! profiled where it is first used, split, and its glue given the loaders of `split/`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::artifacts::{copy_tree, optimise, set_integrity};
use crate::{root, split, target_dir};

fn read(file: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))
}

fn write(file: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(file, bytes).map_err(|e| format!("{}: {e}", file.display()))
}

/// A fresh folder under the target directory for a profile run.
fn fresh(name: &str) -> Result<std::path::PathBuf, String> {
    let dir = target_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Runs a profile script; its output is the index of each function that ran, one per line.
fn profile(what: &str, mut node: Command, keep: &Path) -> Result<BTreeSet<usize>, String> {
    println!("==> {what}, profiled: {}", crate::describe(&node));
    let started = std::time::Instant::now();
    let out = node.output().map_err(|e| format!("node: {e}"))?;
    if !out.status.success() {
        return Err(format!("profiling {what} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    println!("    {what}, profiled: {:.1} s", started.elapsed().as_secs_f64());
    write(&keep.join("ran.txt"), &out.stdout)?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|index| index.parse().map_err(|e| format!("the profile's `{index}`: {e}")))
        .collect()
}

/// Splits `module` (with names) into itself, the first part, and `rest`, both without names.
fn split_into(module: &Path, rest: &Path, wasm: &[u8], ran: &BTreeSet<usize>, what: &str) -> Result<(), String> {
    let parts = split::split(wasm, ran)?;
    println!("    {what}'s module split: {} of {} functions load on demand", parts.moved, parts.functions);
    write(module, &parts.first)?;
    write(rest, &parts.rest)?;
    optimise(module, false, &format!("wasm-opt ({what}'s first part)"))?;
    optimise(rest, false, &format!("wasm-opt ({what}'s rest)"))
}

/// The scenarios whose first plans the widget's first module holds (see `split.rs`): the
/// example page's two widgets. A first plan that runs more loads the rest (one request):
/// with one GPU and its system RAM (`tests/scenarios/desktop-70b-ram.json`) the first part
/// is 5.6 KB larger, past the two-widget page's 150 KB.
const FIRST_PLANS: [&str; 2] = ["web/embed/index.html", "web/embed/scenarios/laptops-8b.json"];

/// Splits the widget's module in `dir` (`stageplan_bg.wasm`, with names) into the functions
/// [`FIRST_PLANS`] run and the rest (`stageplan_rest.wasm`), and gives wasm-bindgen's glue
/// and its declarations the loaders of `split/rest.js`.
pub(crate) fn widget(dir: &Path) -> Result<(), String> {
    let module = dir.join("stageplan_bg.wasm");
    let wasm = read(&module)?;
    let profile_dir = fresh("widget-profile")?;
    // Kept for a look at what moved (`twiggy top whole.wasm`): the module with names.
    write(&profile_dir.join("whole.wasm"), &wasm)?;
    write(&profile_dir.join("stageplan_bg.wasm"), &split::instrument(&wasm)?)?;
    write(&profile_dir.join("stageplan.js"), &read(&dir.join("stageplan.js"))?)?;
    write(&profile_dir.join("package.json"), b"{\"type\": \"module\"}\n")?;
    let mut node = Command::new("node");
    node.arg(root().join("crates/xtask/split/first_plans.mjs")).arg(&profile_dir);
    node.args(FIRST_PLANS.map(|file| root().join(file)));
    let ran = profile("the widget's first plans", node, &profile_dir)?;
    split_into(&module, &dir.join("stageplan_rest.wasm"), &wasm, &ran, "the widget")?;
    patch(
        &dir.join("stageplan.js"),
        &[("export { initSync, __wbg_init as default };", "")],
        include_str!("../split/rest.js"),
    )?;
    patch(
        &dir.join("stageplan.d.ts"),
        &[
            (
                "export function initSync(module: { module: SyncInitInput } | SyncInitInput): InitOutput;",
                "export function initSync(module: { module: SyncInitInput, rest: SyncInitInput }): InitOutput;",
            ),
            (
                "export default function __wbg_init (module_or_path?: { module_or_path: InitInput | Promise<InitInput> } | InitInput | Promise<InitInput>): Promise<InitOutput>;",
                INIT_DECLARATIONS,
            ),
        ],
        "",
    )
}

/// The loaders' declarations in place of wasm-bindgen's `default` (`split/rest.js`).
const INIT_DECLARATIONS: &str = "export type SplitInit = { module_or_path?: InitInput | Promise<InitInput>, rest?: RequestInfo | URL | BufferSource | WebAssembly.Module } | InitInput | Promise<InitInput>;
/** Loads the whole module: the first part and the rest (beside it unless `rest` says where). */
export default function init(options?: SplitInit): Promise<InitOutput>;
/** Loads the first part only: what a widget's first plans run. Run calls through `firstOrRest`. */
export function initFirst(options?: SplitInit): Promise<InitOutput>;
/** Runs `call`; if it needed the rest before the rest was loaded, loads it and runs `call` again. */
export function firstOrRest<T>(call: () => T): Promise<T>;";

/// Replaces each `(from, to)` in `file` — each `from` found exactly once, or the pinned
/// wasm-bindgen's output changed — and appends `tail`.
fn patch(file: &Path, replacements: &[(&str, &str)], tail: &str) -> Result<(), String> {
    let mut text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    for (from, to) in replacements {
        if text.matches(from).count() != 1 {
            return Err(format!("{}: expected `{from}` once (wasm-bindgen's output changed?)", file.display()));
        }
        text = text.replacen(from, to, 1);
    }
    text.push_str(tail);
    std::fs::write(file, text).map_err(|e| format!("{}: {e}", file.display()))
}

/// Where the browser tests' Chromium is (`tests/e2e/harness.mjs`): the page's profile runs in it.
const CHROMIUM: &str = "/usr/bin/chromium";

/// Splits the page's module in `dist` (Trunk's build, `stageplan-web_bg.wasm` with names) into
/// what the page runs to draw its first plan from the example — profiled in Chromium at
/// desktop and phone size (`split/page_first_plan.mjs`) — and the rest
/// (`stageplan-web_rest.wasm`), and gives the glue the start of `split/page.js`. Without
/// Chromium (`cargo xtask serve` on a machine the tests never ran on) the module is served
/// whole, its names dropped.
pub(crate) fn page(dist: &Path) -> Result<(), String> {
    let module = dist.join("stageplan-web_bg.wasm");
    if !Path::new(CHROMIUM).exists() {
        println!("    no Chromium to profile the page's first plan in: its module is served whole");
        return optimise(&module, false, "wasm-opt (the page's module, whole)");
    }
    let wasm = read(&module)?;
    let profile_dir = fresh("page-profile")?;
    copy_tree(dist, &profile_dir)?;
    write(&profile_dir.join("whole.wasm"), &wasm)?;
    let instrumented = split::instrument(&wasm)?;
    let index = profile_dir.join("index.html");
    let html = std::fs::read_to_string(&index).map_err(|e| format!("{}: {e}", index.display()))?;
    write(&index, set_integrity(&html, "/stageplan-web_bg.wasm", &instrumented)?.as_bytes())?;
    write(&profile_dir.join("stageplan-web_bg.wasm"), &instrumented)?;
    let mut node = Command::new("node");
    node.arg(root().join("crates/xtask/split/page_first_plan.mjs")).arg(&profile_dir).current_dir(root());
    let ran = profile("the page's first plan", node, &profile_dir)?;
    split_into(&module, &dist.join("stageplan-web_rest.wasm"), &wasm, &ran, "the page")?;
    patch(
        &dist.join("stageplan-web.js"),
        &[("    wasm.__wbindgen_start();\n", "    startPage();\n")],
        include_str!("../split/page.js"),
    )?;
    let index = dist.join("index.html");
    let html = std::fs::read_to_string(&index).map_err(|e| format!("{}: {e}", index.display()))?;
    write(&index, set_integrity(&html, "/stageplan-web_bg.wasm", &read(&module)?)?.as_bytes())
}
