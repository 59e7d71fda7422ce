//! Each check on small made-up crates: it fails on what it forbids and passes on the rest.

use super::{MAX_LINES, NOTE_LINES, SourceFile, duplicate_consts, module_circles, oversized_files};

/// Files of a crate `demo`: (path under `crates/demo/src/`, text).
fn demo(files: &[(&str, &str)]) -> Vec<SourceFile> {
    files
        .iter()
        .map(|(path, text)| SourceFile { path: format!("crates/demo/src/{path}"), text: (*text).to_owned() })
        .collect()
}

const UI: &str = "mod ui;";
const UI_MOD: &str = "mod inputs;\nmod results;\npub struct Shared;";

#[test]
fn a_circle_through_super_paths_fails_with_the_circle() {
    let files = demo(&[
        ("lib.rs", UI),
        ("ui/mod.rs", UI_MOD),
        ("ui/inputs.rs", "use super::results::prose;\nfn f() {}"),
        ("ui/results.rs", "pub fn prose() {}\n\nfn g() {\n    super::inputs::download();\n}"),
    ]);
    let circles = module_circles(&files);
    assert_eq!(circles.len(), 1, "{circles:#?}");
    assert!(
        circles[0].starts_with("crates/demo: modules use each other: ui::inputs → ui::results → ui::inputs"),
        "{}",
        circles[0]
    );
    assert!(circles[0].contains("crates/demo/src/ui/inputs.rs:1 `super::results::prose`"), "{}", circles[0]);
    assert!(circles[0].contains("crates/demo/src/ui/results.rs:4 `super::inputs::download`"), "{}", circles[0]);
}

#[test]
fn a_child_using_its_parents_items_is_no_circle() {
    let files = demo(&[
        ("lib.rs", "mod ui;\npub use ui::Shared;\nfn f() { crate::ui::inputs::x(); }"),
        ("ui/mod.rs", "mod inputs;\nmod results;\npub struct Shared;\nfn f() { self::inputs::x(); }"),
        ("ui/inputs.rs", "use super::{Shared, results};\nuse crate::Shared as Again;\npub fn x() {}"),
        ("ui/results.rs", "use super::*;\nuse super::super::ui::Shared;"),
    ]);
    assert_eq!(module_circles(&files), Vec::<String>::new());
}

#[test]
fn use_groups_and_super_super_are_followed() {
    let files = demo(&[
        ("lib.rs", "mod a;\nmod b;\nmod d;"),
        ("a.rs", "use crate::{d, b::{c::{self, Thing}, other}};"),
        ("b/mod.rs", "mod c;"),
        ("b/c.rs", "pub struct Thing;\nfn f() { super::super::a::g(); }"),
        ("d.rs", ""),
    ]);
    let circles = module_circles(&files);
    assert_eq!(circles.len(), 2, "{circles:#?}");
    assert!(circles[0].starts_with("crates/demo: modules use each other: a → b → a"), "{}", circles[0]);
    assert!(circles[1].starts_with("crates/demo: modules use each other: a → b::c → a"), "{}", circles[1]);
}

#[test]
fn a_circle_of_top_level_modules_alone_fails() {
    // `a::x` uses `b` and `b` uses `a::y`: no module reaches itself, but `a` and `b` do.
    let files = demo(&[
        ("lib.rs", "mod a;\nmod b;"),
        ("a/mod.rs", "mod x;\nmod y;"),
        ("a/x.rs", "use crate::b::Thing;"),
        ("a/y.rs", "pub fn y() {}"),
        ("b.rs", "pub struct Thing;\nfn f() { crate::a::y::y(); }"),
    ]);
    let circles = module_circles(&files);
    assert_eq!(circles.len(), 1, "{circles:#?}");
    assert!(circles[0].starts_with("crates/demo: modules use each other: a → b → a"), "{}", circles[0]);
}

#[test]
fn tests_comments_and_strings_are_not_code() {
    let files = demo(&[
        ("lib.rs", "mod a;\nmod b;"),
        (
            "a.rs",
            "use crate::b::X;\n\
             #[cfg(test)]\nmod tests;\n\
             #[cfg(all(test, feature = \"x\"))]\nfn only_in_tests() { let _ = '}'; }\n\
             #[cfg(any(test, feature = \"testing\"))]\npub fn kept() {}",
        ),
        (
            "b.rs",
            "pub struct X;\n\
             // crate::a::one()\n\
             /* crate::a::two() /* nested */ crate::a::three() */\n\
             /// [`crate::a`]\n\
             const TEXT: &str = \"crate::a::four()\";\n\
             const RAW: &str = r#\"crate::a::\"five\"()\"#;\n\
             fn brace() -> char { '{' }\n\
             #[cfg(test)]\nmod tests {\n    use crate::a::kept;\n    fn f() { let _ = \"}\"; }\n}",
        ),
        ("a/tests.rs", "use crate::b::X;\nconst TEXT: &str = \"\";"),
        ("b/tests.rs", "use crate::a::kept;"),
    ]);
    assert_eq!(module_circles(&files), Vec::<String>::new());
    assert_eq!(duplicate_consts(&files), Vec::<String>::new());
    // The same use outside the test module is a circle.
    let mut circled = files;
    circled[2].text.push_str("\nfn g() { crate::a::kept(); }");
    let circles = module_circles(&circled);
    assert_eq!(circles.len(), 1, "{circles:#?}");
    assert!(circles[0].contains("b → a: crates/demo/src/b.rs:13 `crate::a::kept`"), "{}", circles[0]);
}

#[test]
fn binaries_are_trees_of_their_own() {
    let files = demo(&[
        ("lib.rs", "pub mod a;\npub mod b;"),
        ("a.rs", "use crate::b::X;"),
        ("b.rs", "pub struct X;"),
        ("bin/tool.rs", "mod b;\nmod a;\nuse crate::a::Y;"),
        ("bin/tool/a.rs", "pub struct Y;"),
        ("bin/tool/b.rs", "use crate::a::Y;"),
    ]);
    assert_eq!(module_circles(&files), Vec::<String>::new());
    let mut circled = files;
    circled[4].text.push_str("\nfn f() { super::b::g(); }");
    let circles = module_circles(&circled);
    assert_eq!(circles.len(), 1, "{circles:#?}");
    assert!(circles[0].starts_with("crates/demo (bin tool): modules use each other: a → b → a"), "{}", circles[0]);
}

fn lines(count: usize) -> String {
    "fn f() {}\n".repeat(count)
}

#[test]
fn a_file_over_the_limit_fails_and_a_long_one_is_noted() {
    let files = [
        SourceFile { path: "crates/demo/src/long.rs".into(), text: lines(MAX_LINES + 1) },
        SourceFile { path: "fuzz/fuzz_targets/at_limit.rs".into(), text: lines(MAX_LINES) },
        SourceFile { path: "crates/demo/src/noted.rs".into(), text: lines(NOTE_LINES + 1) },
        SourceFile { path: "crates/demo/src/short.rs".into(), text: lines(NOTE_LINES) },
    ];
    let (failures, notes) = oversized_files(&files);
    assert_eq!(failures, ["crates/demo/src/long.rs: 901 lines, over 900: split it by concern"]);
    assert_eq!(
        notes,
        [
            "fuzz/fuzz_targets/at_limit.rs: 900 lines (over 600: a candidate to split)",
            "crates/demo/src/noted.rs: 601 lines (over 600: a candidate to split)"
        ]
    );
    assert_eq!(oversized_files(&files[3..]), (vec![], vec![]));
}

#[test]
fn a_constant_defined_twice_fails_with_both_places() {
    let files = [
        SourceFile { path: "crates/core/src/limits.rs".into(), text: "pub const MAX_CONTEXT: u64 = 1 << 26;".into() },
        SourceFile {
            path: "crates/core/src/export/mod.rs".into(),
            text: "use std::fmt;\n\n/// Engines' bound.\npub(crate) const MAX_CONTEXT: u64 = 1 << 31;".into(),
        },
    ];
    assert_eq!(
        duplicate_consts(&files),
        ["`const MAX_CONTEXT` is defined 2 times: crates/core/src/export/mod.rs:4, crates/core/src/limits.rs:1; \
             use the one, or name each for what it bounds"]
    );
    // In two crates, or local to a function, it is the same fact twice.
    let other_crate = [
        SourceFile { path: "crates/cpu/src/lib.rs".into(), text: "fn f() { const MAX_THREADS: usize = 4096; }".into() },
        SourceFile { path: "crates/core/src/limits.rs".into(), text: "const MAX_THREADS: u32 = 4096;".into() },
    ];
    assert_eq!(duplicate_consts(&other_crate).len(), 1);
}

#[test]
fn associated_generic_test_and_repeatable_constants_pass() {
    let files = [
        SourceFile {
            path: "crates/core/src/engine.rs".into(),
            text: "pub struct E;\nimpl E {\n    pub const ALL: [E; 1] = [E];\n    fn f() { const LOCAL: u8 = 1; }\n}\n\
                   fn g<const N: usize>() {}\nconst fn h() {}\nconst _: () = ();\n\
                   macro_rules! all { ($t:ident) => { impl $t { pub const ALL: &[$t] = &[]; } }; }\n\
                   fn none() { const NONE: u32 = u32::MAX; }"
                .into(),
        },
        SourceFile {
            path: "crates/core/src/export.rs".into(),
            text: "pub struct T;\n#[cfg(test)]\nconst LOCAL: u8 = 2;\n\
                   trait K { const ALL: usize; }\nimpl K for T { const ALL: usize = 1; }\n\
                   fn g<T, const N: usize>() {}\nfn none() { const NONE: u64 = u64::MAX; }"
                .into(),
        },
        SourceFile { path: "crates/core/src/tests.rs".into(), text: "const LOCAL: u8 = 3;".into() },
        SourceFile { path: "crates/core/tests/export.rs".into(), text: "const LOCAL: u8 = 4;".into() },
        SourceFile { path: "fuzz/fuzz_targets/export.rs".into(), text: "const LOCAL: u8 = 5;".into() },
    ];
    assert_eq!(duplicate_consts(&files), Vec::<String>::new());
}

#[test]
fn a_call_behind_a_reexport_names_the_module_it_comes_from() {
    // The core as it was (42bcdad): `planner` reads `calibration`'s constants, and
    // `calibration` planned through the crate root's `pub use planner::plan`. `crate::plan(…)`
    // is the function, not the `plan` module of the same name.
    let files = demo(&[
        ("lib.rs", "pub mod calibration;\npub mod plan;\npub mod planner;\npub use planner::{plan, plan_with as run};"),
        ("plan.rs", "pub struct Plan;"),
        ("planner.rs", "use crate::calibration::FITTED;\nuse crate::plan::Plan;\npub fn plan() -> Plan { Plan }"),
        ("calibration.rs", "pub const FITTED: u8 = 1;\nfn fit() { let _ = crate::plan(); }"),
    ]);
    let circles = module_circles(&files);
    assert_eq!(circles.len(), 1, "{circles:#?}");
    assert!(
        circles[0].starts_with("crates/demo: modules use each other: calibration → planner → calibration"),
        "{}",
        circles[0]
    );
    assert!(circles[0].contains("crates/demo/src/calibration.rs:2 `crate::plan`"), "{}", circles[0]);
    // Through an alias, and a re-export of a re-export, alike.
    let mut aliased = demo(&[
        ("lib.rs", "pub mod calibration;\npub mod plan;\npub mod planner;\npub use planner::{plan, plan_with as run};"),
        ("plan.rs", "pub struct Plan;"),
        ("planner.rs", "use crate::calibration::FITTED;\npub fn plan_with() {}"),
        ("calibration.rs", "pub mod again;\npub const FITTED: u8 = 1;"),
        ("calibration/again.rs", "pub(crate) use crate::run as go;\nfn f() { self::go(); }"),
    ]);
    assert_eq!(module_circles(&aliased).len(), 1, "{:#?}", module_circles(&aliased));
    // The `plan` module itself is no circle.
    aliased[4].text = "fn f() { let _: crate::plan::Plan; }".to_owned();
    assert_eq!(module_circles(&aliased), Vec::<String>::new());
}
