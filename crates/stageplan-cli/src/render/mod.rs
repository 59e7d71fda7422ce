//! Text output: tables and text a person reads in a terminal, without colour. Commands
//! compute values; these functions only format them, one file per kind of output.

pub(crate) mod calibrate;
pub(crate) mod cluster;
pub(crate) mod gpu;
pub(crate) mod model;
pub(crate) mod plan;
pub(crate) mod receipt;

/// Longest name a table cell shows; longer ones end in `…`.
const NAME_CELL: usize = 40;

/// A name from the input as a table cell: one line, no terminal controls, at most
/// [`NAME_CELL`] characters.
fn cell(name: &str) -> String {
    let name = stageplan::quote::line(name);
    if name.chars().count() <= NAME_CELL {
        return name.into_owned();
    }
    let mut cut: String = name.chars().take(NAME_CELL - 1).collect();
    cut.push('…');
    cut
}

/// A parameter count: `8.03 B`, `494.0 M`.
fn params(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 { format!("{:.2} B", n / 1e9) } else { format!("{:.1} M", n / 1e6) }
}
