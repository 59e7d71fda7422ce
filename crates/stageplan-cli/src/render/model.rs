//! A model's summary (`model`) and the presets (`presets`).

use std::fmt::Write;

use stageplan::WeightFormat;
use stageplan::model::ModelSummary;
use stageplan::presets::{DEVICES, MODELS};
use stageplan::units::{format_bandwidth, format_bytes, format_compute, group_digits};

use super::params;

/// A model's summary.
pub(crate) fn summary(s: &ModelSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} · {}", stageplan::quote::line(&s.name), s.weights);
    let _ = writeln!(out, "parameters      {} ({})", params(s.params), group_digits(s.params));
    let _ = writeln!(
        out,
        "weights         {} ({} bytes)",
        format_bytes(s.weight_bytes as f64),
        group_digits(s.weight_bytes)
    );
    let _ = writeln!(
        out,
        "embedding       {}{}",
        format_bytes(s.embedding_bytes as f64),
        if s.tied_embeddings { " (tied: the last stage keeps a copy as the LM head)" } else { "" }
    );
    let _ = writeln!(out, "head            {} (final norm and LM head)", format_bytes(s.head_bytes as f64));
    let formats = match s.kv_v_format {
        Some(v) => format!("K {}, V {v}", s.kv_format),
        None => s.kv_format.to_string(),
    };
    let _ = writeln!(out, "KV cache        {} per token ({formats})", format_bytes(s.kv_bytes_per_token as f64));
    if let Some(max) = s.max_context {
        let _ = writeln!(out, "max context     {} tokens", group_digits(max));
    }
    let mix: Vec<String> = s
        .type_mix
        .iter()
        .map(|t| format!("{} {:.1}%", t.ty, t.bytes as f64 * 100.0 / s.weight_bytes.max(1) as f64))
        .collect();
    let _ = writeln!(out, "type mix        {}", mix.join(", "));
    let _ = writeln!(out, "\n  layer  bytes                  params       window");
    for layer in &s.layers {
        let _ = writeln!(
            out,
            "  {:<5}  {:<21}  {:<11}  {}",
            layer.index,
            format!("{} ({})", format_bytes(layer.bytes as f64), group_digits(layer.bytes)),
            params(layer.params),
            layer.window.map_or_else(|| "–".to_owned(), group_digits)
        );
    }
    out
}

/// The line that says how little of the files was read.
pub(crate) fn reads(files: usize, bytes_read: u64, file_bytes: u64) -> String {
    format!(
        "\nread {} of {} ({:.2}%) from {files} file{}: the headers\n",
        format_bytes(bytes_read as f64),
        format_bytes(file_bytes as f64),
        bytes_read as f64 * 100.0 / file_bytes.max(1) as f64,
        if files == 1 { "" } else { "s" }
    )
}

/// Model presets, device presets and weight formats.
pub(crate) fn presets() -> String {
    let mut out = String::from("model presets\n");
    let name_width = MODELS.iter().map(|m| m.name.len()).max().unwrap_or(0);
    let title_width = MODELS.iter().map(|m| m.title.chars().count()).max().unwrap_or(0);
    for m in MODELS {
        let params = params(m.published_params as u64);
        let _ = writeln!(out, "  {:<name_width$} {:<title_width$} {params:>9}", m.name, m.title);
    }
    out.push_str("\ndevice presets            memory      bandwidth    compute (fp16)  reserve\n");
    for d in DEVICES {
        let _ = writeln!(
            out,
            "  {:<22}  {:>10}  {:>10}  {:>14}  {:>9}   {}",
            d.name,
            format_bytes(d.memory),
            format_bandwidth(d.bandwidth),
            format_compute(d.compute),
            format_bytes(d.reserve),
            d.title
        );
    }
    out.push_str("\nGPU links (`gpu_link`; copies through host RAM unless -p2p or NVLink)\n                          bandwidth  latency\n");
    for l in stageplan::presets::GPU_LINKS {
        let _ = writeln!(
            out,
            "  {:<22}  {:>10}  {:>7}   {}",
            l.name,
            format_bandwidth(l.bandwidth),
            stageplan::units::format_seconds(l.latency),
            l.title
        );
    }
    out.push_str("\nweight formats\n  ");
    let names: Vec<String> = WeightFormat::all().iter().map(ToString::to_string).collect();
    out.push_str(&names.join(", "));
    out.push_str("\n\nKV-cache formats\n  ");
    let kv: Vec<&str> = stageplan::tensor_type::KV_FORMATS.iter().map(|t| t.name()).collect();
    out.push_str(&kv.join(", "));
    out.push('\n');
    out
}
