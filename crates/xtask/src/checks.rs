//! `cargo xtask checks` (and a step of `cargo xtask test`): what holds across the whole
//! repository and no compiler checks, read from the source text with std alone.
//!
//! - **No module circles.** In each crate, the modules (`a::b` is `src/a/b.rs` or
//!   `src/a/b/mod.rs`, or a `mod b` in `a`) and, coarser, the top-level modules, each form a
//!   DAG. A module uses another when its code names it by a path from `crate::`, `super::`
//!   or `self::` (use groups like `crate::{a, b::c}` too); a path names the longest
//!   module it starts with, so `super::x` for an item `x` of the parent names the parent,
//!   and a path that is called (`crate::plan(…)`) names an item, never a module of that
//!   name. A name a module re-exports (`pub use planner::plan;` in `lib.rs`) names the
//!   module it comes from, so a `crate::plan(…)` behind the crate root's re-export is a use
//!   of `planner`. A module naming itself or an ancestor does not count: a parent's `mod` and
//!   `use` lines are glue, and it names its children anyway.
//! - **No file over [`MAX_LINES`] lines** under `crates/` or `fuzz/`; each over
//!   [`NOTE_LINES`] is printed as a note.
//! - **No constant defined twice**: a `const NAME` in two places of the workspace's code is
//!   two statements of one fact that can drift apart (two `MAX_CONTEXT`s did), unless its
//!   name is in [`REPEATABLE`] with the reason. Associated constants (`Engine::ALL`) are
//!   named by their type and do not count.
//!
//! Tests are left out of the first and the last: `#[cfg(test)]` items (or
//! `#[cfg(all(test, …))]`), modules so declared and files named `tests.rs`. Comments and
//! string literals are never read as code.

mod code;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::time::Instant;

use crate::root;
use code::{Scan, scan, tokens, without_tests};

/// Lines a source file may have.
pub(crate) const MAX_LINES: usize = 900;

/// Lines past which a file is named as a candidate to split.
pub(crate) const NOTE_LINES: usize = 600;

/// Constant names that may be defined in more than one place, and why.
pub(crate) const REPEATABLE: [(&str, &str); 2] = [
    ("NONE", "a function's own sentinel for an empty table cell, in the cell's type"),
    ("GIB", "the unit 2^30 bytes, written in the type at hand (f64 figures, u64 records); not a bound"),
];

/// A source file: its path from the repository root, with `/` between folders, and its text.
#[derive(Debug)]
pub(crate) struct SourceFile {
    pub(crate) path: String,
    pub(crate) text: String,
}

/// Runs every check on the repository; prints the notes, and fails listing every finding.
pub(crate) fn checks() -> Result<(), String> {
    println!("==> repository checks: module circles, file sizes, duplicate constants");
    let started = Instant::now();
    let files = sources(&root())?;
    let (mut failures, notes) = oversized_files(&files);
    failures.extend(module_circles(&files));
    failures.extend(duplicate_consts(&files));
    for note in notes {
        println!("    note: {note}");
    }
    println!("    repository checks: {} files, {:.1} s", files.len(), started.elapsed().as_secs_f64());
    if failures.is_empty() { Ok(()) } else { Err(format!("repository checks failed:\n{}", failures.join("\n"))) }
}

/// Every `.rs` file under `crates/` and `fuzz/`, build outputs and hidden folders aside.
fn sources(root: &Path) -> Result<Vec<SourceFile>, String> {
    let mut files = Vec::new();
    let mut stack = vec![root.join("crates"), root.join("fuzz")];
    while let Some(dir) = stack.pop() {
        if !dir.is_dir() {
            continue;
        }
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let relative = path.strip_prefix(root).unwrap_or(&path);
                let parts: Vec<_> = relative.components().map(|c| c.as_os_str().to_string_lossy()).collect();
                files.push(SourceFile { path: parts.join("/"), text });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// Files over [`MAX_LINES`] (the failures) and over [`NOTE_LINES`] (the notes).
pub(crate) fn oversized_files(files: &[SourceFile]) -> (Vec<String>, Vec<String>) {
    let (mut failures, mut notes) = (Vec::new(), Vec::new());
    for file in files {
        let lines = file.text.lines().count();
        if lines > MAX_LINES {
            failures.push(format!("{}: {lines} lines, over {MAX_LINES}: split it by concern", file.path));
        } else if lines > NOTE_LINES {
            notes.push(format!("{}: {lines} lines (over {NOTE_LINES}: a candidate to split)", file.path));
        }
    }
    (failures, notes)
}

/// Every circle of modules, per crate: one line with the circle, then where each step is named.
pub(crate) fn module_circles(files: &[SourceFile]) -> Vec<String> {
    let mut found = Vec::new();
    for tree in trees(files) {
        // (from, to) → where `from` first names `to`.
        let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut top_edges: BTreeMap<(String, String), String> = BTreeMap::new();
        for file in &tree.files {
            for path in &file.scan.paths {
                let from = [file.module.as_slice(), &path.inline].concat();
                if from.is_empty() {
                    continue; // the crate's root: an ancestor of all, in no circle
                }
                let Some(absolute) = resolve(&from, &path.segments) else { continue };
                let Some(to) = tree.module_named(absolute, path.value) else { continue };
                let to = to.as_slice();
                if from.starts_with(to) {
                    continue; // itself or an ancestor
                }
                let place = format!("{}:{} `{}`", file.path, path.line, path.segments.join("::"));
                edges.entry((from.join("::"), to.join("::"))).or_insert_with(|| place.clone());
                if let (Some(a), Some(b)) = (from.first(), to.first())
                    && a != b
                {
                    top_edges.entry((a.clone(), b.clone())).or_insert(place);
                }
            }
        }
        // A circle of top-level modules only is printed once, with the finer one's places.
        let mut circles = BTreeMap::new();
        for edges in [&edges, &top_edges] {
            for circle in circles_of(edges) {
                let mut places = String::new();
                for step in circle.windows(2) {
                    let place = &edges[&(step[0].clone(), step[1].clone())];
                    places.push_str(&format!("\n    {} → {}: {place}", step[0], step[1]));
                }
                circles.entry(circle.join(" → ")).or_insert(places);
            }
        }
        found.extend(
            circles
                .into_iter()
                .map(|(circle, places)| format!("{}: modules use each other: {circle}{places}", tree.label)),
        );
    }
    found
}

/// Constants defined in more than one place, names in [`REPEATABLE`] aside.
pub(crate) fn duplicate_consts(files: &[SourceFile]) -> Vec<String> {
    let mut places: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let trees = trees(files);
    for file in trees.iter().flat_map(|t| &t.files) {
        for (line, name) in &file.scan.consts {
            places.entry(name).or_default().push(format!("{}:{line}", file.path));
        }
    }
    places
        .into_iter()
        .filter(|(name, places)| places.len() > 1 && !REPEATABLE.iter().any(|(n, _)| n == name))
        .map(|(name, mut places)| {
            places.sort();
            format!(
                "`const {name}` is defined {} times: {}; use the one, or name each for what it bounds",
                places.len(),
                places.join(", ")
            )
        })
        .collect()
}

/// One module tree: a crate's library (with its `main.rs`) or one of its `src/bin/` programs.
struct Tree<'a> {
    label: String,
    files: Vec<ParsedFile<'a>>,
    modules: BTreeSet<Vec<String>>,
    /// Per module, the names its `pub use` items give, and the absolute paths they name.
    reexports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
}

impl Tree<'_> {
    /// The module an absolute path names: the longest module it starts with (not its last
    /// segment when it is called, a `value`), or where a name re-exported there comes from.
    /// `None` for the crate root and for what is not in the crate.
    fn module_named(&self, absolute: Vec<String>, value: bool) -> Option<Vec<String>> {
        let mut path = absolute;
        // Re-exports of re-exports, a few deep; a loop of them is no module.
        for _ in 0..8 {
            let limit = path.len() - usize::from(value && !path.is_empty());
            let module = (0..=limit).rev().map(|n| &path[..n]).find(|m| m.is_empty() || self.modules.contains(*m))?;
            let reexported = path.get(module.len()).and_then(|name| self.reexports.get(module)?.get(name));
            match reexported {
                Some(target) => path = [target.as_slice(), &path[module.len() + 1..]].concat(),
                None => return (!module.is_empty()).then(|| module.to_vec()),
            }
        }
        None
    }
}

struct ParsedFile<'a> {
    path: &'a str,
    module: Vec<String>,
    scan: Scan,
}

/// The module trees of the crates under `crates/`, their test code left out.
fn trees(files: &[SourceFile]) -> Vec<Tree<'_>> {
    let mut trees: BTreeMap<String, (Vec<ParsedFile<'_>>, BTreeSet<Vec<String>>)> = BTreeMap::new();
    for file in files {
        let parts: Vec<&str> = file.path.split('/').collect();
        let [crates, name, src, rest @ ..] = parts.as_slice() else { continue };
        if *crates != "crates" || *src != "src" || rest.iter().any(|p| *p == "tests.rs" || *p == "tests") {
            continue;
        }
        let (label, module) = match rest {
            ["bin", program, inner @ ..] => {
                let program = program.trim_end_matches(".rs");
                (format!("crates/{name} (bin {program})"), module_of(if inner == ["main.rs"] { &[] } else { inner }))
            }
            _ => (format!("crates/{name}"), module_of(if matches!(rest, ["lib.rs" | "main.rs"]) { &[] } else { rest })),
        };
        let (tokens, test_modules) = without_tests(&tokens(&file.text));
        let scan = scan(&tokens);
        let entry = trees.entry(label).or_default();
        entry.1.extend(test_modules.into_iter().map(|m| [module.clone(), vec![m]].concat()));
        entry.0.push(ParsedFile { path: &file.path, module, scan });
    }
    trees
        .into_iter()
        .map(|(label, (files, test_modules))| {
            let under_test = |m: &[String]| test_modules.iter().any(|t| m.starts_with(t));
            let files: Vec<_> = files.into_iter().filter(|f| !under_test(&f.module)).collect();
            let mut modules = BTreeSet::new();
            for file in &files {
                modules.insert(file.module.clone());
                for declared in &file.scan.declared {
                    modules.insert([file.module.as_slice(), declared].concat());
                }
            }
            let modules = modules.into_iter().filter(|m| !under_test(m)).collect();
            let mut reexports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
            for file in &files {
                for reexport in &file.scan.reexports {
                    let module = [file.module.as_slice(), &reexport.inline].concat();
                    // From `crate`, `super` or `self`; else a child module (or another crate).
                    let target = match reexport.segments.first().map(String::as_str) {
                        Some("crate" | "super" | "self") => resolve(&module, &reexport.segments),
                        _ => Some([module.as_slice(), &reexport.segments].concat()),
                    };
                    if let Some(target) = target {
                        reexports.entry(module).or_default().insert(reexport.name.clone(), target);
                    }
                }
            }
            Tree { label, files, modules, reexports }
        })
        .collect()
}

/// `a/b.rs` and `a/b/mod.rs` are `a::b`.
fn module_of(parts: &[&str]) -> Vec<String> {
    let mut module: Vec<String> = parts.iter().map(|p| p.trim_end_matches(".rs").to_owned()).collect();
    if module.last().is_some_and(|m| m == "mod") {
        module.pop();
    }
    module
}

/// The absolute module path `segments` (from `crate`, `super` or `self`) name from `module`.
fn resolve(module: &[String], segments: &[String]) -> Option<Vec<String>> {
    let mut path = module.to_vec();
    for segment in segments {
        match segment.as_str() {
            "crate" => path.clear(),
            "super" => {
                path.pop()?;
            }
            "self" => {}
            name => path.push(name.to_owned()),
        }
    }
    Some(path)
}

/// One shortest circle per strongly connected component, from its first module.
fn circles_of(edges: &BTreeMap<(String, String), String>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    let reach: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|m| (*m, reaches(&next, m))).collect();
    let mut done = BTreeSet::new();
    let mut circles = Vec::new();
    for start in next.keys() {
        let component: BTreeSet<&str> = reach[start].iter().copied().filter(|m| reach[m].contains(start)).collect();
        if component.len() < 2 || !done.insert(component.clone()) {
            continue;
        }
        // Breadth first from `start` back to it, inside the component.
        let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([*start]);
        'search: while let Some(m) = queue.pop_front() {
            for n in &next[m] {
                if n == start {
                    let mut circle = vec![m.to_owned(), (*start).to_owned()];
                    let mut at = m;
                    while at != *start {
                        at = parent[at];
                        circle.insert(0, at.to_owned());
                    }
                    circles.push(circle);
                    break 'search;
                }
                if component.contains(n) && !parent.contains_key(n) && n != start {
                    parent.insert(n, m);
                    queue.push_back(n);
                }
            }
        }
    }
    circles
}

/// The modules `from` reaches, itself included.
fn reaches<'a>(next: &BTreeMap<&'a str, Vec<&'a str>>, from: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::from([from]);
    let mut stack = vec![from];
    while let Some(m) = stack.pop() {
        for n in &next[m] {
            if seen.insert(n) {
                stack.push(n);
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests;
