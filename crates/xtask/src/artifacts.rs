//! What the web builds share: wasm-opt's settings, an `integrity` pinned to a file's bytes,
//! and copying a tree of files.

use std::path::Path;
use std::process::Command;

use crate::{setup::tool_path, step};

/// `wasm-opt -Oz` in place, keeping the name section when `names`.
pub(crate) fn optimise(module: &Path, names: bool, title: &str) -> Result<(), String> {
    let mut opt = Command::new("wasm-opt");
    opt.arg("-Oz").args(WASM_FEATURES).arg(LOW_MEMORY_UNUSED);
    if names {
        opt.arg("-g");
    }
    opt.arg(module).arg("-o").arg(module).env("PATH", tool_path());
    step(title, opt)
}

/// Lets wasm-opt fold constant offsets into loads and stores (1.9 KB gzip of the widget's
/// wasm, 1.8 KB of the page's, which `index.html` asks of Trunk too): rustc puts the 1 MiB
/// stack at the bottom of memory, growing down, so only a stack within a kilobyte of
/// overflowing would touch the lowest kilobyte this assumes unused.
pub(crate) const LOW_MEMORY_UNUSED: &str = "--low-memory-unused";

/// WebAssembly features rustc's wasm32 target emits, which wasm-opt must accept.
pub(crate) const WASM_FEATURES: [&str; 6] = [
    "--enable-bulk-memory",
    "--enable-mutable-globals",
    "--enable-nontrapping-float-to-int",
    "--enable-sign-ext",
    "--enable-reference-types",
    "--enable-multivalue",
];

/// `html` with the `integrity` of the tag that names `href` set to the SHA-384 of `bytes`.
pub(crate) fn set_integrity(html: &str, href: &str, bytes: &[u8]) -> Result<String, String> {
    use base64::Engine;
    use sha2::Digest;
    let integrity = format!("sha384-{}", base64::engine::general_purpose::STANDARD.encode(sha2::Sha384::digest(bytes)));
    // The tag that names the file, and the `integrity=` value inside it (quoted or not).
    let at = [format!("href={href}"), format!("href=\"{href}\"")]
        .iter()
        .find_map(|named| html.find(named.as_str()))
        .ok_or(format!("dist/index.html has no tag for {href}"))?;
    let tag_start = html[..at].rfind('<').ok_or(format!("no tag around {href}"))?;
    let tag_end = at + html[at..].find('>').ok_or(format!("the tag of {href} does not end"))?;
    let tag = &html[tag_start..tag_end];
    let value_at = tag.find("integrity=").ok_or(format!("the tag of {href} has no integrity"))? + "integrity=".len();
    let quoted = tag[value_at..].starts_with('"');
    let value_start = value_at + usize::from(quoted);
    let value_len = tag[value_start..].find(if quoted { '"' } else { ' ' }).unwrap_or(tag.len() - value_start);
    let from = tag_start + value_start;
    Ok(format!("{}{integrity}{}", &html[..from], &html[from + value_len..]))
}

pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
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
