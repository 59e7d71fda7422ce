//! A scenario's machines checked into nodes: each device's figures (its preset's under the
//! fields given), a machine's several GPUs and the link between them, its host RAM and
//! probe, and the links between machines.

use crate::device::{Backend, DeviceKind, Efficiency};
use crate::error::{ScenarioError, suggest};
use crate::limits::{
    MAX_BYTES, MAX_GPUS_PER_MACHINE, MAX_LATENCY_S, MAX_LINK_PAIRS, MAX_NAME_CHARS, MAX_NODES, MAX_THREADS,
    MEASURED_RATES, MIN_RATE, READ_FACTORS,
};
use crate::presets::{DevicePreset, GpuLinkPreset, RamPreset};
use crate::problem::{DEFAULT_LINK, GpuOf, Host, Link, Links, Node, Peer};
use crate::scenario::{GpuSpec, HostSpec, NodeSpec, ProbeProvenance, Scenario};
use crate::units::{Bandwidth, Bytes, Compute, Seconds, format_bytes};

impl Scenario {
    /// What a plan of this scenario should say about how its machines are written: a GPU
    /// machine with `count` is that many machines, each with its own RAM, on the network
    /// (people mean GPUs in one box as often as not); a device whose reserve leaves it
    /// nothing, which the planner leaves out (valid, but rarely meant).
    pub(super) fn notes(&self, nodes: &[Node]) -> Vec<String> {
        let gpu = |spec: &NodeSpec| {
            spec.kind.or_else(|| spec.device.as_deref().and_then(|d| DevicePreset::find(d).ok()).map(|p| p.kind))
                == Some(DeviceKind::Gpu)
        };
        self.nodes
            .iter()
            .filter(|spec| spec.gpus.is_none() && spec.count.is_some_and(|c| c > 1) && gpu(spec))
            .map(|spec| {
                let (name, count) = (crate::quote::line(spec.name.trim()), spec.count.unwrap_or(1));
                let device = spec.device.as_deref().map_or_else(String::new, |d| format!("\"device\": \"{}\", ", crate::quote::line(d)));
                format!(
                    "`{name}` with `count` {count} is {count} machines, each with its own RAM; for GPUs in one machine, write `\"gpus\": [{{{device}\"count\": {count}}}]`"
                )
            })
            .chain(nodes.iter().filter(|n| n.reserve >= n.memory).map(|n| {
                format!(
                    "`{}` keeps {} of its {} as `reserve`: nothing is left for the model there, so no stage goes on it; give a smaller `reserve` to use it",
                    crate::quote::line(&n.name),
                    format_bytes(n.reserve as f64),
                    format_bytes(n.memory as f64)
                )
            }))
            .collect()
    }

    pub(super) fn check_nodes(&self) -> Result<Vec<Node>, ScenarioError> {
        check_nodes(&self.nodes)
    }

    pub(super) fn check_links(&self, nodes: &[Node]) -> Result<Links, ScenarioError> {
        let default = match &self.links.default {
            Some(l) => check_link(l.bandwidth, l.latency, "links.default")?,
            None => DEFAULT_LINK,
        };
        if self.links.pairs.len() > MAX_LINK_PAIRS {
            return Err(ScenarioError::field(
                "links.pairs",
                format!(
                    "lists {} pairs; give at most {MAX_LINK_PAIRS} and let `links.default` cover the rest",
                    self.links.pairs.len()
                ),
            ));
        }
        let mut links = Links::uniform(nodes.len(), default);
        // The GPUs of one machine are consecutive nodes; each pair of them is on its link.
        let mut first = 0;
        while first < nodes.len() {
            let machine = nodes[first].gpu_of.as_ref().map(|g| g.machine.as_str());
            let end = first
                + nodes[first..]
                    .iter()
                    .take_while(|n| n.gpu_of.as_ref().map(|g| g.machine.as_str()) == machine)
                    .count();
            if let Some(gpu) = &nodes[first].gpu_of {
                for a in first..end {
                    for b in a + 1..end {
                        links.set(a, b, gpu.link);
                    }
                }
            }
            first = end;
        }
        // Names sorted once, each pair's names found by binary search: a node's, or a
        // machine's with several GPUs, which stands for each of them.
        let mut by_name: Vec<(&str, usize)> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (machine(n), i))
            .chain(nodes.iter().enumerate().filter(|(_, n)| n.gpu_of.is_some()).map(|(i, n)| (n.name.as_str(), i)))
            .collect();
        by_name.sort_unstable();
        for (i, pair) in self.links.pairs.iter().enumerate() {
            let at = format!("links.pairs[{i}]");
            let link = check_link(pair.bandwidth, pair.latency, &at)?;
            let named = |name: &str| {
                let from = by_name.partition_point(|(n, _)| *n < name);
                let to = from + by_name[from..].iter().take_while(|(n, _)| *n == name).count();
                if from == to {
                    return Err(ScenarioError::field(
                        format!("{at}.between"),
                        format!("names `{}`, which is not a node; use a name from `nodes`", crate::quote::line(name)),
                    ));
                }
                Ok(&by_name[from..to])
            };
            let (a, b) = (named(&pair.between[0])?, named(&pair.between[1])?);
            if a.iter().any(|&(_, x)| b.iter().any(|&(_, y)| x == y)) {
                return Err(ScenarioError::field(
                    format!("{at}.between"),
                    "names the same machine twice; a link joins two machines (a machine's GPUs are joined by its `gpu_link`)",
                ));
            }
            for &(_, a) in a {
                for &(_, b) in b {
                    // Two machines are apart, so only an earlier entry set their pair: the
                    // later's figures would be kept silently.
                    if links.is_set(a, b) {
                        return Err(ScenarioError::field(
                            format!("{at}.between"),
                            "joins two machines an earlier entry joins already; give each pair of machines one entry",
                        ));
                    }
                    links.set(a, b, link);
                }
            }
        }
        Ok(links)
    }
}

/// One machine written as a scenario's `nodes[]` entry (what `stageplan probe` prints),
/// checked as a scenario holding it checks it: its nodes, one a GPU of a machine with
/// several. What a machine offers when it joins a fleet (`stageplan agent --node-file`).
///
/// # Errors
/// What a scenario would refuse in it, at the field within the entry (`memory`,
/// `gpus[1].device`), or a `count` past one: an entry for one machine.
pub fn machine_nodes(spec: &NodeSpec) -> Result<Vec<Node>, ScenarioError> {
    if let Some(count) = spec.count.filter(|&count| count > 1) {
        return Err(ScenarioError::field(
            "count",
            format!("is {count}, and this is one machine; leave `count` out (each machine joins with its own entry)"),
        ));
    }
    check_nodes(std::slice::from_ref(spec)).map_err(|mut e| {
        e.path = e.path.strip_prefix("nodes[0].").unwrap_or(&e.path).to_owned();
        e
    })
}

/// A scenario's `nodes` checked into nodes, one a device: a machine's each GPU, `count`
/// machines each.
fn check_nodes(specs: &[NodeSpec]) -> Result<Vec<Node>, ScenarioError> {
    if specs.is_empty() {
        return Err(ScenarioError::field(
            "nodes",
            "is empty; list at least one machine, e.g. `{\"name\": \"desk\", \"device\": \"rtx-4090\"}`",
        ));
    }
    // The machines `count` expands to, checked before any is built.
    let mut total = 0usize;
    for (i, spec) in specs.iter().enumerate() {
        let count = spec.count.unwrap_or(1);
        if count == 0 {
            return Err(ScenarioError::field(format!("nodes[{i}].count"), "is 0; give at least 1"));
        }
        let gpus = gpus_per_machine(spec, &|field| format!("nodes[{i}].{field}"))?;
        total = total.saturating_add((count as usize).saturating_mul(gpus));
        if total > MAX_NODES {
            return Err(ScenarioError::field(
                format!("nodes[{i}].count"),
                format!(
                    "brings the cluster past {MAX_NODES} devices; plan at most {MAX_NODES} (group alike machines with `count`)"
                ),
            ));
        }
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(total);
    // Which spec each node came from, to name the field of a repeated name.
    let mut spec_of: Vec<usize> = Vec::with_capacity(total);
    for (i, spec) in specs.iter().enumerate() {
        let at = |field: &str| format!("nodes[{i}].{field}");
        let name = spec.name.trim();
        if name.chars().count() > MAX_NAME_CHARS {
            return Err(ScenarioError::field(
                at("name"),
                format!("is {} characters long; give a name of at most {MAX_NAME_CHARS}", name.chars().count()),
            ));
        }
        if let Some(c) = name.chars().find(|&c| c.is_control()) {
            return Err(ScenarioError::field(
                at("name"),
                format!("holds the control character U+{:04X}; use letters, digits and punctuation", u32::from(c)),
            ));
        }
        if name.is_empty() {
            return Err(ScenarioError::field(at("name"), "is empty; give every node a unique name"));
        }
        // Checked once for both kinds of machine (one copy of the check in the page).
        let host = spec.host.as_ref().map(|host| check_host(host, &at)).transpose()?;
        if let Some(gpus) = &spec.gpus {
            // Counted and bounded in the first pass.
            let machine = check_gpus(spec, gpus, &at)?;
            for k in 1..=spec.count.unwrap_or(1) {
                let name = spec.machine_name(k);
                for (index, gpu) in machine.gpus.iter().enumerate() {
                    spec_of.push(i);
                    let index = index as u32;
                    let gpu_of = GpuOf { machine: name.clone(), index, link: machine.link, peer: machine.peer };
                    // The machine's one RAM beside each of its GPUs: `-ot` keeps tensors of
                    // any GPU's layers there. The cost model divides it among them
                    // (`cost::RamShare`), so it is counted once.
                    nodes.push(Node {
                        host: host.clone(),
                        ..gpu.node(crate::problem::gpu_node_name(&name, index), Some(gpu_of))
                    });
                }
            }
            continue;
        }
        let device = check_device(
            DeviceFields {
                device: spec.device.as_deref(),
                kind: spec.kind,
                memory: spec.memory,
                bandwidth: spec.bandwidth,
                compute: spec.compute,
                reserve: spec.reserve,
                efficiency: spec.efficiency,
                backend: spec.backend,
            },
            &at,
        )?;
        let kind = device.kind;
        if let Some(probe) = &spec.probe {
            check_probe(probe, &at)?;
        }
        if let Some(threads) = spec.threads
            && !(1..=MAX_THREADS).contains(&threads)
        {
            return Err(ScenarioError::field(
                at("threads"),
                format!("is {threads}; give the threads llama.cpp runs with, 1 to {MAX_THREADS}"),
            ));
        }
        // A CPU's or a unified memory's RAM is its `memory`: a `host` beside it would be
        // the same RAM counted twice.
        if spec.host.is_some()
            && let Some(kind @ (DeviceKind::Cpu | DeviceKind::Unified)) = kind
        {
            return Err(ScenarioError::field(
                at("host"),
                format!(
                    "is given for a `{}` machine, whose RAM is its `memory`: the plan would count that RAM twice; remove `host`, or set `kind` to `gpu` for a GPU beside system RAM",
                    kind.name()
                ),
            ));
        }
        let count = spec.count.unwrap_or(1);
        for k in 1..=count {
            let name = spec.machine_name(k);
            spec_of.push(i);
            nodes.push(Node {
                threads: spec.threads,
                probe: spec.probe.clone(),
                host: host.clone(),
                ..device.node(name, None)
            });
        }
    }
    // Repeated names: pairwise, which [`MAX_NODES`] bounds at half a million string
    // comparisons (a sort would cost the web page's download more than it saves here).
    // A machine's name names its GPUs together (`links.pairs`, replicas, exports), so no
    // other node may have it.
    for k in 1..nodes.len() {
        let (name, one_gpu) = (machine(&nodes[k]), nodes[k].gpu_of.is_none());
        let clash = |n: &Node| n.name == nodes[k].name || machine(n) == name && (one_gpu || n.gpu_of.is_none());
        if nodes[..k].iter().any(clash) {
            return Err(ScenarioError::field(
                format!("nodes[{}].name", spec_of[k]),
                format!("`{}` is used twice; give every machine a unique name", crate::quote::line(name)),
            ));
        }
    }
    Ok(nodes)
}

/// The machine a node is, or is a GPU of: its name.
fn machine(node: &Node) -> &str {
    node.gpu_of.as_ref().map_or(node.name.as_str(), |g| g.machine.as_str())
}

/// A device's fields as a scenario gives them: a machine's own, or one of its `gpus`.
#[derive(Copy, Clone)]
struct DeviceFields<'a> {
    device: Option<&'a str>,
    kind: Option<DeviceKind>,
    memory: Option<Bytes>,
    bandwidth: Option<Bandwidth>,
    compute: Option<Compute>,
    reserve: Option<Bytes>,
    efficiency: Option<Efficiency>,
    backend: Option<Backend>,
}

/// A device checked: its preset's figures under the fields given.
struct Device {
    preset: Option<String>,
    kind: Option<DeviceKind>,
    memory: u64,
    bandwidth: f64,
    compute: f64,
    reserve: u64,
    efficiency: Efficiency,
    backend: Backend,
}

impl Device {
    /// The node this device is, named `name`, with no host, threads or probe.
    fn node(&self, name: String, gpu_of: Option<GpuOf>) -> Node {
        Node {
            name,
            device: self.preset.clone(),
            kind: self.kind,
            memory: self.memory,
            bandwidth: self.bandwidth,
            compute: self.compute,
            reserve: self.reserve,
            efficiency: self.efficiency,
            backend: self.backend,
            threads: None,
            probe: None,
            host: None,
            gpu_of,
        }
    }
}

/// Checks a device's fields, each error at `at(field)`.
fn check_device(fields: DeviceFields<'_>, at: &dyn Fn(&str) -> String) -> Result<Device, ScenarioError> {
    let preset = match fields.device {
        None => None,
        Some(device) => Some(DevicePreset::find(device).map_err(|suggestion| {
            ScenarioError::field(
                at("device"),
                format!(
                    "`{device}` is not a device preset{}; run `stageplan presets` to list them, or give `memory`, `bandwidth` and `compute` instead",
                    suggest(suggestion.as_deref())
                ),
            )
        })?),
    };
    let pick = |own: Option<f64>, preset_value: Option<f64>, field: &str, example: &str| {
        own.or(preset_value).ok_or_else(|| {
            ScenarioError::field(at(field), format!("is missing; give it (e.g. `{example}`) or pick a `device` preset"))
        })
    };
    let memory = pick(fields.memory.map(Bytes::get), preset.map(|p| p.memory), "memory", "24 GiB")?;
    let bandwidth = pick(fields.bandwidth.map(Bandwidth::get), preset.map(|p| p.bandwidth), "bandwidth", "1008 GB/s")?;
    let compute = pick(fields.compute.map(Compute::get), preset.map(|p| p.compute), "compute", "165 TFLOPS")?;
    let reserve = fields.reserve.map(Bytes::get).or(preset.map(|p| p.reserve)).unwrap_or(0.0);
    for (value, field) in [(bandwidth, "bandwidth"), (compute, "compute")] {
        check_rate(value, &at(field))?;
    }
    for (value, field) in [(memory, "memory"), (reserve, "reserve")] {
        if value > MAX_BYTES {
            return Err(ScenarioError::field(at(field), "is over an exabyte; check the unit"));
        }
    }
    let kind = fields.kind.or(preset.map(|p| p.kind));
    let efficiency = fields.efficiency.unwrap_or_default();
    for (value, field) in [(efficiency.bandwidth, "efficiency.bandwidth"), (efficiency.compute, "efficiency.compute")] {
        if !(value > 0.0 && value <= 1.5) {
            return Err(ScenarioError::field(
                at(field),
                format!("is {}; give a fraction above 0 and at most 1.5, such as 0.8", crate::units::sig3(value)),
            ));
        }
    }
    let backend = fields.backend.or(preset.map(|p| p.backend)).unwrap_or_else(|| Backend::of_kind(kind));
    Ok(Device {
        preset: fields.device.map(str::to_owned),
        kind,
        memory: memory as u64,
        bandwidth,
        compute,
        reserve: reserve as u64,
        efficiency,
        backend,
    })
}

/// How many GPUs a machine of `spec` has: 1 without `gpus`, else their counts, each at
/// least 1, together at most [`MAX_GPUS_PER_MACHINE`].
fn gpus_per_machine(spec: &NodeSpec, at: &dyn Fn(&str) -> String) -> Result<usize, ScenarioError> {
    let Some(gpus) = &spec.gpus else { return Ok(1) };
    if gpus.is_empty() {
        return Err(ScenarioError::field(
            at("gpus"),
            "is empty; list the machine's GPUs, e.g. `[{\"device\": \"rtx-3090\", \"count\": 2}]`, or give its `device` instead",
        ));
    }
    let mut total = 0usize;
    for (j, gpu) in gpus.iter().enumerate() {
        let count = gpu.count.unwrap_or(1);
        if count == 0 {
            return Err(ScenarioError::field(at(&format!("gpus[{j}].count")), "is 0; give at least 1"));
        }
        total = total.saturating_add(count as usize);
        if total > MAX_GPUS_PER_MACHINE {
            return Err(ScenarioError::field(
                at(&format!("gpus[{j}].count")),
                format!(
                    "brings the machine past {MAX_GPUS_PER_MACHINE} GPUs, the most llama.cpp runs in one server; give at most {MAX_GPUS_PER_MACHINE}"
                ),
            ));
        }
    }
    Ok(total)
}

/// A machine with several GPUs, checked: each GPU in device order, and their link.
struct Machine {
    gpus: Vec<Device>,
    link: Link,
    peer: Peer,
}

/// Checks a machine's `gpus` and `gpu_link`; its own device fields must be absent.
fn check_gpus(spec: &NodeSpec, gpus: &[GpuSpec], at: &dyn Fn(&str) -> String) -> Result<Machine, ScenarioError> {
    let own = [
        ("device", spec.device.is_some()),
        ("kind", spec.kind.is_some()),
        ("memory", spec.memory.is_some()),
        ("bandwidth", spec.bandwidth.is_some()),
        ("compute", spec.compute.is_some()),
        ("reserve", spec.reserve.is_some()),
        ("efficiency", spec.efficiency.is_some()),
        ("backend", spec.backend.is_some()),
        ("threads", spec.threads.is_some()),
        ("probe", spec.probe.is_some()),
    ];
    if let Some((field, _)) = own.iter().find(|(_, given)| *given) {
        return Err(ScenarioError::field(
            at(field),
            "is given beside `gpus`; give each GPU's figures in `gpus`, or drop `gpus` for a machine with one device",
        ));
    }
    let preset = match &spec.gpu_link {
        None => GpuLinkPreset::DEFAULT,
        Some(name) => GpuLinkPreset::find(name)
            .map_err(|suggestion| {
                ScenarioError::field(
                    at("gpu_link"),
                    format!(
                        "`{}` is not a GPU-link preset{}; run `stageplan presets` to list them (other figures: a `links.pairs` entry between two of the GPUs)",
                        crate::quote::line(name),
                        suggest(suggestion.as_deref())
                    ),
                )
            })?
            ,
    };
    let (link, peer) = (preset.link(), preset.peer());
    let mut devices = Vec::with_capacity(gpus.len());
    for (j, gpu) in gpus.iter().enumerate() {
        let at_gpu = |field: &str| at(&format!("gpus[{j}].{field}"));
        let device = check_device(
            DeviceFields {
                device: gpu.device.as_deref(),
                kind: Some(DeviceKind::Gpu),
                memory: gpu.memory,
                bandwidth: gpu.bandwidth,
                compute: gpu.compute,
                reserve: gpu.reserve,
                efficiency: None,
                backend: gpu.backend,
            },
            &at_gpu,
        )?;
        if let Some(preset) = gpu.device.as_deref().and_then(|d| DevicePreset::find(d).ok())
            && preset.kind != DeviceKind::Gpu
        {
            return Err(ScenarioError::field(
                at_gpu("device"),
                format!(
                    "`{}` is a `{}` machine, not a GPU; `gpus` lists discrete GPUs: give that machine a node of its own",
                    preset.name,
                    preset.kind.name()
                ),
            ));
        }
        for _ in 0..gpu.count.unwrap_or(1) {
            devices.push(Device { preset: device.preset.clone(), ..device });
        }
    }
    Ok(Machine { gpus: devices, link, peer })
}

pub(super) fn check_link(bandwidth: Bandwidth, latency: Seconds, at: &str) -> Result<Link, ScenarioError> {
    check_rate(bandwidth.get(), &format!("{at}.bandwidth"))?;
    if latency.get() > MAX_LATENCY_S {
        return Err(ScenarioError::field(
            format!("{at}.latency"),
            format!(
                "is {} s, over a minute; check the unit (a network's is a few ms: write `0.5 ms`)",
                crate::units::sig3(latency.get())
            ),
        ));
    }
    Ok(Link { bandwidth: bandwidth.get(), latency: latency.get() })
}

/// A bandwidth or compute of at least [`MIN_RATE`] per second.
pub(super) fn check_rate(value: f64, at: &str) -> Result<(), ScenarioError> {
    if value <= 0.0 {
        return Err(ScenarioError::field(at, "is 0; it must be greater than 0"));
    }
    if value < MIN_RATE {
        return Err(ScenarioError::field(at, format!("is {value:e} per second, under {MIN_RATE}; check the unit")));
    }
    Ok(())
}

/// A machine's host tier: its RAM's size and bandwidth (given or from a `ram` preset), a
/// reserve below the size, threads and a link within reason.
fn check_host(spec: &HostSpec, at: &dyn Fn(&str) -> String) -> Result<Host, ScenarioError> {
    let preset = match &spec.ram {
        None => None,
        Some(ram) => Some(RamPreset::find(ram).map_err(|suggestion| {
            ScenarioError::field(
                at("host.ram"),
                format!(
                    "`{ram}` is not a RAM preset{}; run `stageplan presets` to list them, or give `host.bandwidth` instead",
                    suggest(suggestion.as_deref())
                ),
            )
        })?),
    };
    let memory = spec.memory.map(Bytes::get).ok_or_else(|| {
        ScenarioError::field(at("host.memory"), "is missing; give the machine's system RAM, e.g. `64 GiB`")
    })?;
    let bandwidth = spec.bandwidth.map(Bandwidth::get).or(preset.map(|p| p.bandwidth)).ok_or_else(|| {
        ScenarioError::field(
            at("host.bandwidth"),
            "is missing; give the RAM's bandwidth (e.g. `96 GB/s`) or a `ram` preset such as `ddr5-6000-2ch`",
        )
    })?;
    let reserve = spec.reserve.map_or(Host::DEFAULT_RESERVE as f64, Bytes::get);
    let link = spec.link.map_or(Host::DEFAULT_LINK, Bandwidth::get);
    for (value, field) in [(bandwidth, "host.bandwidth"), (link, "host.link")] {
        check_rate(value, &at(field))?;
    }
    for (value, field) in [(memory, "host.memory"), (reserve, "host.reserve")] {
        if value > MAX_BYTES {
            return Err(ScenarioError::field(at(field), "is over an exabyte; check the unit"));
        }
    }
    // Nothing left for the model (not even the token embedding llama.cpp keeps in RAM):
    // a unit or a figure mistyped, said at the field that was written.
    if reserve >= memory {
        let (memory, reserve) = (format_bytes(memory), format_bytes(reserve));
        return Err(match spec.reserve {
            Some(_) => ScenarioError::field(
                at("host.reserve"),
                format!("is {reserve}, not under the RAM's {memory}: nothing would be left for the model; give less"),
            ),
            None => ScenarioError::field(
                at("host.memory"),
                format!(
                    "is {memory}, not over the {reserve} kept for the system by default; give the whole RAM, or a smaller `host.reserve`"
                ),
            ),
        });
    }
    let threads = spec.threads.unwrap_or(Host::DEFAULT_THREADS);
    if !(1..=MAX_THREADS).contains(&threads) {
        return Err(ScenarioError::field(
            at("host.threads"),
            format!("is {threads}; give the threads llama.cpp runs with, 1 to {MAX_THREADS}"),
        ));
    }
    Ok(Host {
        ram: preset.map(|p| p.name.to_owned()),
        memory: memory as u64,
        reserve: reserve as u64,
        bandwidth,
        threads,
        link,
    })
}

/// A node's probe, as measured figures must be: a spread from 0 and rates a CPU could reach.
fn check_probe(probe: &ProbeProvenance, at: &dyn Fn(&str) -> String) -> Result<(), ScenarioError> {
    let spread = probe.bandwidth_spread;
    if !(spread.is_finite() && spread >= 0.0) {
        return Err(ScenarioError::field(
            at("probe.bandwidth_spread"),
            format!("is {}; give the probe's (max − min) ÷ median, 0 or more", crate::units::sig3(spread)),
        ));
    }
    if let Some(engine) = &probe.engine {
        // Each class's products in weights per second, and a prompt's in FLOP/s: one range.
        let rates = engine.rates().map(|(class, rate)| (class, rate, "weights per second"));
        for (field, rate, unit) in rates.into_iter().chain([("prefill", engine.prefill, "FLOP/s")]) {
            if let Some(rate) = rate
                && !MEASURED_RATES.contains(&rate)
            {
                return Err(ScenarioError::field(
                    at(&format!("probe.engine.{field}")),
                    format!(
                        "is {}; give {unit}, 1e3 to 1e15, as `stageplan probe --engine` writes it",
                        if rate > *MEASURED_RATES.end() { "over 1e15".to_owned() } else { crate::units::sig3(rate) }
                    ),
                ));
            }
        }
        if let Some(read) = engine.read
            && !READ_FACTORS.contains(&read)
        {
            return Err(ScenarioError::field(
                at("probe.engine.read"),
                format!(
                    "is {}; give how much faster than the probe llama.cpp read, 1 to 2, as `stageplan probe --engine` writes it",
                    crate::units::sig3(read)
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(json: &str) -> Result<crate::problem::Problem, ScenarioError> {
        Scenario::from_json(json).and_then(|s| s.problem())
    }

    #[test]
    fn a_machines_gpus_are_one_node_each_on_its_gpu_link() {
        let p = problem(
            r#"{"model": {"preset": "llama-3.1-8b"},
                "nodes": [{"name": "box", "count": 2, "gpus": [{"device": "rtx-3090", "count": 2}, {"device": "rtx-4090", "memory": "20 GiB"}],
                           "gpu_link": "pcie3-x8", "host": {"ram": "ddr4-3200-2ch", "memory": "128 GiB"}},
                          {"name": "mac", "device": "m2-ultra-192gb"}],
                "links": {"pairs": [{"between": ["box-2", "mac"], "bandwidth": "10 Gbit/s", "latency": "1 ms"}]}}"#,
        )
        .unwrap();
        let names: Vec<&str> = p.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["box-1/gpu0", "box-1/gpu1", "box-1/gpu2", "box-2/gpu0", "box-2/gpu1", "box-2/gpu2", "mac"]);
        let gpu = p.nodes[5].gpu_of.as_ref().unwrap();
        assert_eq!((gpu.machine.as_str(), gpu.index), ("box-2", 2));
        assert_eq!(p.nodes[5].memory, 20 << 30);
        assert_eq!(p.nodes[0].kind, Some(DeviceKind::Gpu));
        // The machine's RAM beside each of its GPUs (the cost model divides it among them).
        let with_ram: Vec<&str> = p.nodes.iter().filter(|n| n.host.is_some()).map(|n| n.name.as_str()).collect();
        assert_eq!(with_ram, names[..6]);
        assert_eq!(p.nodes[5].host.as_ref().unwrap().memory, 128 << 30);
        let pcie3_x8 = GpuLinkPreset::find("pcie3-x8").unwrap().link();
        assert_eq!(pcie3_x8.bandwidth, 0.985e9 * 8.0 / 2.0, "no P2P: through host RAM, twice over the bus");
        // Within a machine its link; between machines the default, or the pair named by machine.
        assert_eq!(p.links.get(0, 2), pcie3_x8);
        assert_eq!(p.links.get(4, 3), pcie3_x8);
        assert_eq!(p.links.get(2, 3), DEFAULT_LINK);
        for gpu in 3..6 {
            assert_eq!(p.links.get(gpu, 6).latency, 1e-3);
        }
        assert_eq!(p.links.get(0, 6), DEFAULT_LINK);
    }

    #[test]
    fn a_machine_with_several_gpus_is_refused_at_the_field_that_cannot_be() {
        let node = |fields: &str| {
            let json = format!(r#"{{"model": {{"preset": "llama-3.1-8b"}}, "nodes": [{{"name": "box", {fields}}}]}}"#);
            let error = problem(&json).unwrap_err();
            (error.path, error.problem)
        };
        let cases: [(&str, &str, &str); 10] = [
            (r#""gpus": []"#, "nodes[0].gpus", "is empty"),
            (r#""gpus": [{"device": "rtx-3090", "count": 0}]"#, "nodes[0].gpus[0].count", "is 0"),
            (
                r#""gpus": [{"device": "rtx-3090", "count": 9}, {"device": "rtx-4090", "count": 8}]"#,
                "nodes[0].gpus[1].count",
                "past 16 GPUs",
            ),
            (r#""device": "rtx-3090", "gpus": [{"device": "rtx-3090"}]"#, "nodes[0].device", "beside `gpus`"),
            (r#""threads": 8, "gpus": [{"device": "rtx-3090"}]"#, "nodes[0].threads", "beside `gpus`"),
            (r#""host": {"ram": "ddr4-3200-2ch"}, "gpus": [{"device": "rtx-3090"}]"#, "nodes[0].host.memory", ""),
            (
                r#""gpus": [{"device": "rtx-3090"}], "gpu_link": "pcie4-x9""#,
                "nodes[0].gpu_link",
                "is not a GPU-link preset",
            ),
            (r#""gpus": [{"device": "rtx-3090"}], "gpu_link": {"bandwidth": "9 GB/s"}"#, "nodes[0].gpu_link", ""),
            (r#""gpus": [{"device": "m2-ultra-192gb"}]"#, "nodes[0].gpus[0].device", "not a GPU"),
            (r#""gpus": [{"memory": "24 GiB", "bandwidth": "900 GB/s"}]"#, "nodes[0].gpus[0].compute", "is missing"),
        ];
        for (fields, path, words) in cases {
            let (at, problem) = node(fields);
            assert_eq!(at, path, "{fields}: {problem}");
            assert!(problem.contains(words), "{fields}: {problem}");
        }
        let cluster = r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "box", "count": 600, "gpus": [{"device": "rtx-3090", "count": 2}]}]}"#;
        assert_eq!(problem(cluster).unwrap_err().path, "nodes[0].count");
        let same = r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}]}],
                       "links": {"pairs": [{"between": ["box", "box/gpu1"], "bandwidth": "1 GB/s", "latency": "1 ms"}]}}"#;
        assert_eq!(problem(same).unwrap_err().path, "links.pairs[0].between");
        // A machine's name is its GPUs' together: no other node may have it.
        let named_twice = r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}]},
                              {"name": "box", "device": "rtx-4090"}]}"#;
        let error = problem(named_twice).unwrap_err();
        assert_eq!(
            (error.path.as_str(), error.problem.as_str()),
            ("nodes[1].name", "`box` is used twice; give every machine a unique name")
        );
        let before = r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "box", "device": "rtx-4090"},
                          {"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}]}]}"#;
        assert_eq!(problem(before).unwrap_err().path, "nodes[1].name");
    }

    #[test]
    fn a_pair_of_machines_is_linked_by_one_entry() {
        let pairs = |pairs: &str| {
            let json = format!(
                r#"{{"model": {{"preset": "llama-3.1-8b"}}, "nodes": [{{"name": "desk", "device": "rtx-4090"}}, {{"name": "den", "device": "rtx-3090"}},
                    {{"name": "box", "gpus": [{{"device": "rtx-3090", "count": 2}}]}}], "links": {{"pairs": [{pairs}]}}}}"#
            );
            problem(&json).map(|_| ()).map_err(|e| (e.path, e.problem))
        };
        let pair =
            |a: &str, b: &str| format!(r#"{{"between": ["{a}", "{b}"], "bandwidth": "1 GB/s", "latency": "1 ms"}}"#);
        assert_eq!(pairs(&[pair("desk", "den"), pair("desk", "box")].join(", ")), Ok(()));
        for twice in [pair("desk", "den"), pair("den", "desk")] {
            let (at, words) = pairs(&[pair("desk", "den"), twice].join(", ")).unwrap_err();
            assert_eq!(at, "links.pairs[1].between");
            assert!(words.contains("an earlier entry joins already"), "{words}");
        }
        // A machine's name stands for each of its GPUs.
        let (at, _) = pairs(&[pair("box", "desk"), pair("desk", "box/gpu1")].join(", ")).unwrap_err();
        assert_eq!(at, "links.pairs[1].between");
    }
}
