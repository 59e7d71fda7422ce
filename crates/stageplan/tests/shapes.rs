//! `src/presets/shapes.rs`, each model preset's transformer as constant data, is generated
//! from the presets' `config.json` files: `UPDATE_EXPECT=1` rewrites it, and this test fails
//! while it is stale.

// A test of the source tree: it reads and writes the generated file.
#![allow(clippy::disallowed_methods)]

#[test]
fn shapes_are_generated_from_the_configs() {
    let text = stageplan::presets::shapes_source();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/presets/shapes.rs");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    assert!(std::fs::read_to_string(path).unwrap() == text, "shapes.rs is stale: UPDATE_EXPECT=1 regenerates it");
}
