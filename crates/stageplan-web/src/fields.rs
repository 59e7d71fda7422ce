//! Where an input's problem is shown. The core's errors carry the JSON path of their field
//! as data (`nodes[2].memory`); the page maps each path to the field the user typed in, and
//! names machines by their names, so a message sits beside its field and says "`mac`
//! memory", not "`nodes[2].memory`". The core's message is otherwise kept as it is: the
//! page and the CLI never disagree about what is wrong.

use stageplan::ScenarioError;

/// A field of the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// A field by its element id: `context`, `batch`, `kv`, `preset`, `weights`, `config`,
    /// `model-file`, `draft`, `mmproj-weights`, `mmproj-compute`, `link-bandwidth`,
    /// `link-latency`.
    Field(&'static str),
    /// A machine's field: its node id and the part (`name`, `device`, `memory`, …).
    Node(u64, &'static str),
}

/// A problem with what was typed, and the field it is about (none: the scenario as a whole).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    pub place: Option<Place>,
    pub message: String,
}

impl InputError {
    pub fn at(place: Place, message: impl Into<String>) -> InputError {
        InputError { place: Some(place), message: message.into() }
    }

    /// The message for `place`, if the problem is there.
    pub fn message_at(&self, place: Place) -> Option<&str> {
        (self.place == Some(place)).then_some(self.message.as_str())
    }
}

const NODE_PARTS: [&str; 11] =
    ["name", "device", "kind", "memory", "bandwidth", "compute", "reserve", "ram", "ram-memory", "gpus", "gpu-link"];

/// The page's machines, in scenario order (`nodes[i]`): each one's id and name.
pub type Machines<'a> = [(u64, &'a str)];

/// Places a core error about the page's scenario on the field its path names, with
/// `nodes[i]` written as the machine's name and serde's " at line L column C" dropped (the
/// page's JSON is not what the user wrote). `config`: the model is a pasted config.json,
/// whose own errors name its fields bare (`hidden_size`).
pub fn place(machines: &Machines<'_>, config: bool, error: &ScenarioError) -> InputError {
    let shown = |message: String| message.split(" at line ").next().unwrap_or(&message).to_owned();
    let path = error.path.as_str();
    if let Some((index, part)) = node_path(path)
        && let Some(&(id, name)) = machines.get(index)
    {
        // The host tier's fields sit in the RAM select and size beside the device's.
        let part = match part {
            "host.memory" => "ram-memory",
            p if p.starts_with("host") => "ram",
            // A machine's GPUs: their number and figures in one row, the link in its select.
            "gpu_link" => "gpu-link",
            p if p.starts_with("gpus") => {
                let last = p.rsplit('.').next().unwrap_or(p);
                NODE_PARTS.iter().copied().find(|q| *q == last).unwrap_or("gpus")
            }
            p => NODE_PARTS.iter().copied().find(|q| *q == p).unwrap_or("name"),
        };
        let what = if part == "name" { String::new() } else { format!(" {part}") };
        let name = if name.trim().is_empty() { format!("machine {}", index + 1) } else { name.to_owned() };
        let message = error.message_about(&format!("`{}`{what}", stageplan::quote::line(&name)));
        return InputError::at(Place::Node(id, part), shown(message));
    }
    let message = shown(error.to_string());
    let field = match path {
        "workload.context" => Some("context"),
        "workload.batch" => Some("batch"),
        "workload.kv" => Some("kv"),
        "workload.kv_v" => Some("kv-v"),
        "model" | "model.preset" => Some("preset"),
        "model.weights" => Some("weights"),
        "model.file" => Some("model-file"),
        p if p.starts_with("model.draft") => Some("draft"),
        "model.mmproj.compute" => Some("mmproj-compute"),
        p if p.starts_with("model.mmproj") => Some("mmproj-weights"),
        "links.default.bandwidth" => Some("link-bandwidth"),
        "links.default.latency" => Some("link-latency"),
        p if p.starts_with("model.config") || (config && !p.contains(['.', '['])) => Some("config"),
        _ => None,
    };
    InputError { place: field.map(Place::Field), message }
}

/// `nodes[3].memory` → `(3, "memory")`; `nodes[3]` → `(3, "")`.
fn node_path(path: &str) -> Option<(usize, &str)> {
    let rest = path.strip_prefix("nodes[")?;
    let (index, rest) = rest.split_once(']')?;
    Some((index.parse().ok()?, rest.strip_prefix('.').unwrap_or(rest)))
}

/// A whole count as people write it: `8192`, `8,192`, `32k` (×1024, as context lengths
/// are named), `1M`. `None`: not a count.
pub fn count(text: &str) -> Option<u64> {
    let t: String = text.trim().chars().filter(|c| !matches!(c, ',' | '_' | ' ')).collect();
    let (digits, scale) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1024),
        Some((i, 'm' | 'M')) => (&t[..i], 1024 * 1024),
        _ => (t.as_str(), 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// Mixed GPUs as people write them: `RTX 5090 + RTX 4090`, `2× rtx-3090 + rtx-4090` — each
/// term a count (`2×`, `2x`, `2 x`) and a device preset, named by its id or its title
/// (`RTX 3060 12GB` is `rtx-3060-12gb`). `None` without a `+`: not a list.
pub fn gpu_list(text: &str) -> Option<Vec<(u64, String)>> {
    if !text.contains('+') {
        return None;
    }
    text.split('+')
        .map(|term| {
            let term = term.trim();
            let split = term.find(|c: char| !c.is_ascii_digit()).unwrap_or(term.len());
            let (digits, rest) = term.split_at(split);
            let (count, device) = match rest.trim_start().strip_prefix(['×', 'x', 'X', '*']) {
                Some(device) if !digits.is_empty() => (digits.parse().ok()?, device),
                _ => (1, term),
            };
            let id: Vec<String> = device.split_whitespace().map(str::to_lowercase).collect();
            (count > 0 && !id.is_empty()).then(|| (count, id.join("-")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_gpus_read_as_people_write_them() {
        let list = |pairs: &[(u64, &str)]| Some(pairs.iter().map(|&(n, d)| (n, d.to_owned())).collect::<Vec<_>>());
        assert_eq!(gpu_list("RTX 5090 + RTX 4090"), list(&[(1, "rtx-5090"), (1, "rtx-4090")]));
        assert_eq!(gpu_list("2× rtx-3090+rtx-4090"), list(&[(2, "rtx-3090"), (1, "rtx-4090")]));
        assert_eq!(gpu_list("2 x RTX 3060 12GB + 1x A100 80GB"), list(&[(2, "rtx-3060-12gb"), (1, "a100-80gb")]));
        // A name that starts with digits is a device, not a count.
        assert_eq!(gpu_list("rtx-4090 + 4090"), list(&[(1, "rtx-4090"), (1, "4090")]));
        for text in ["2", "rtx-4090", "rtx-4090 + ", "0× rtx-4090 + rtx-3090", "+"] {
            assert_eq!(gpu_list(text).filter(|l| !l.is_empty()), None, "{text}");
        }
    }

    #[test]
    fn counts_read_as_people_write_them() {
        for (text, n) in [("8192", Some(8192)), (" 8,192 ", Some(8192)), ("32k", Some(32768)), ("128K", Some(131072))] {
            assert_eq!(count(text), n, "{text}");
        }
        for text in ["", "k", "-1", "1.5k", "32kb", "99999999999999999999", "18014398509481984k"] {
            assert_eq!(count(text), None, "{text}");
        }
        assert_eq!(count("1M"), Some(1 << 20));
    }
}
