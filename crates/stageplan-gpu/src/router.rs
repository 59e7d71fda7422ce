//! Routing keyed requests: each request to a replica (or device), by weight, so that a
//! replica joining or leaving moves as few keys as it can.
//!
//! The key is hashed once with blake3; everything else derives from that digest, so a
//! request's replica is deterministic and content-addressed. Three modes:
//!
//! - [`Mode::Landing`]: the digest picks a landing device (`digest mod n`, weights ignored);
//!   when the landing device's running load exceeds the least-loaded device's by more than
//!   `spill`, the item spills to the least-loaded one. The least-loaded device comes from a
//!   heap of per-device loads with lazy deletion, rebuilt whenever stale entries outnumber
//!   the devices (so the heap stays proportional to the device count, not to the stream).
//! - [`Mode::Weighted`]: a weighted jump chain (below): a device's share of the keys follows
//!   its weight (its measured throughput), and a device joining or leaving moves only the
//!   keys it takes or held. Spilling applies as in `Landing`, on load per unit of weight.
//! - [`Mode::Bounded`]: consistent hashing with bounded loads (V. Mirrokni, M. Thorup and
//!   M. Zadimoghaddam, *Consistent Hashing with Bounded Loads*, 2018): devices are tried in
//!   the key's chain order and the first whose load plus the item stays within `(1 + ε) ×`
//!   its weight's share of the total takes it. So every device's load stays within
//!   `(1 + ε) ×` its share — unless an item is larger than every device's slack (early in a
//!   stream, or one huge item), when it goes where its load per weight ends lowest,
//!   exceeding the bound by at most that item.
//!
//! **The weighted jump chain.** Devices sit in slots with a nominal weight `a_s`; `P_t` is
//! the sum of the weights of slots `0..=t`. Picture the slots added one at a time and a key
//! jumping to slot `t` with probability `a_t ÷ P_t` (weighted reservoir sampling): it ends on
//! slot `s` with probability `a_s ÷ P`, and adding a slot moves a key only onto it. Staying
//! put from slot `b` through slot `t` has probability `Π P_{u−1} ÷ P_u = P_b ÷ P_t`, so the
//! next jump from `b` is the first `t` with `P_t > P_b ÷ r` for one uniform `r` — the idea of
//! J. Lamping and E. Veach's *jump consistent hash* (2014), with weights. Where the chain
//! stands after the fleet the allocator started with does not depend on the path, so that
//! place is drawn in one step (inverse sampling), and only devices added since cost jumps:
//! about `ln(P ÷ P_base)`, none for a fleet that has not grown. Each draw is found in O(1)
//! through a guide table over the prefix sums, where weighted rendezvous hashing computes a
//! score for every device.
//!
//! A slot whose device left stays in the sums, so no other key moves: a key landing there
//! draws a fresh chain (its next *attempt*), which spreads the leaver's keys over the others
//! by weight (a slot added since the start, if nothing was ever turned away from it, is
//! simply dropped). A joining device takes the smallest vacant slot at least its weight,
//! keeping a landing with probability `weight ÷ a_s` (else the key draws again), or a new
//! slot at the end. Either way keys move only onto the joiner or off the leaver. When vacant slots
//! outweigh the devices many times over (heavy churn), a key that misses
//! [`MAX_ATTEMPTS`] times falls back to weighted rendezvous hashing (D. G. Thaler and
//! C. V. Ravishankar, 1998), O(n) but as consistent.
//!
//! A zero-cost item is not assigned (`Ok(None)`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// How items find devices.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Mode {
    /// `digest mod n`, then spill to the least-loaded device beyond `spill` extra load.
    Landing { spill: u64 },
    /// The weighted jump chain, then spill as in `Landing`.
    Weighted { spill: u64 },
    /// Chain order under a `(1 + epsilon) × share` load cap.
    Bounded { epsilon: f64 },
}

/// Chains a key draws before it falls back to rendezvous hashing. A miss is a landing on a
/// vacant slot or one a lighter device holds; with vacant weight below the devices' own the
/// fallback's chance is under 2⁻⁶⁴.
pub const MAX_ATTEMPTS: u64 = 64;

/// A routing failure, with what to do.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RouteError {
    #[error("no devices to assign to; add at least one device")]
    ZeroDevices,
    #[error("device {id} does not exist (there are {count}, numbered 0 to {count} − 1); use an id from `add_device`")]
    DeviceOutOfRange { id: usize, count: usize },
    #[error(
        "device {device}'s load {load} plus an item of {cost} overflows; reset the loads (`clear`) or use smaller cost units"
    )]
    LoadOverflow { device: usize, load: u64, cost: u64 },
    #[error("could not allocate memory for {what}; free memory or route over fewer devices")]
    Allocation { what: &'static str },
    #[error("`{field}` is {value}; {fix}")]
    Invalid { field: &'static str, value: String, fix: &'static str },
}

/// No device: a vacant slot.
const VACANT: usize = usize::MAX;

/// The slots of the weighted jump chain; see the module docs.
#[derive(Clone, Debug, Default)]
struct Slots {
    /// `P_t`: the nominal weights of slots `0..=t`. Only ever appended to, so a chain over the
    /// first slots never changes.
    prefix: Vec<f64>,
    /// `a_s`, kept to find a vacant slot for a joining device.
    nominal: Vec<f64>,
    /// The device in each slot, or [`VACANT`].
    device: Vec<usize>,
    /// The chance a landing on the slot stays: the device's weight ÷ `a_s`; 0 when vacant.
    keep: Vec<f64>,
    /// `guide[c]`: the first slot whose prefix sum exceeds `c × P ÷ guide.len()`.
    guide: Vec<u32>,
    /// Slots `0..base` are the fleet the allocator started with: a key's place among them
    /// is drawn directly (below), so only slots added since cost jumps.
    base: usize,
}

impl Slots {
    fn total(&self) -> f64 {
        self.prefix.last().copied().unwrap_or(0.0)
    }

    /// The first slot `t` with `P_t > x`, for `0 ≤ x < P`.
    fn first_above(&self, x: f64) -> usize {
        let cells = self.guide.len();
        let cell = ((x * (cells as f64 / self.total())) as usize).min(cells - 1);
        let mut t = self.guide[cell] as usize;
        // The cell is rounded; step back where rounding went one too far.
        while t > 0 && self.prefix[t - 1] > x {
            t -= 1;
        }
        while self.prefix[t] <= x {
            t += 1;
        }
        t
    }

    /// The slot attempt `attempt` of the key with digest `h` ends on.
    ///
    /// Where the chain stands after the first `base` slots does not depend on how it got
    /// there, and those slots never change: it is drawn in one step, slot `s` with chance
    /// `a_s ÷ P_{base−1}` (inverse sampling through the guide table). From there, jumps: a
    /// fleet that has not grown since makes none.
    fn land(&self, h: u64, attempt: u64) -> usize {
        let total = self.total();
        let mut state = h ^ attempt.wrapping_mul(0xd6e8_feb8_6659_fd93);
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            unit(mix(state))
        };
        let (mut at, mut time) = match self.base {
            0 => (0, 0),
            base => (self.first_above(next() * self.prefix[base - 1]), base - 1),
        };
        loop {
            let threshold = self.prefix[time] / next();
            if threshold >= total {
                return at;
            }
            at = self.first_above(threshold);
            time = at;
        }
    }

    /// Appends a slot of nominal weight `weight` held by `device`.
    fn push(&mut self, weight: f64, device: usize) -> Result<usize, RouteError> {
        let full = |_| RouteError::Allocation { what: "a slot" };
        self.prefix.try_reserve(1).map_err(full)?;
        self.nominal.try_reserve(1).map_err(full)?;
        self.device.try_reserve(1).map_err(full)?;
        self.keep.try_reserve(1).map_err(full)?;
        self.prefix.push(self.total() + weight);
        let guide = match guide(&self.prefix) {
            Ok(guide) => guide,
            Err(e) => {
                self.prefix.pop();
                return Err(e);
            }
        };
        self.guide = guide;
        self.nominal.push(weight);
        self.device.push(device);
        self.keep.push(1.0);
        Ok(self.prefix.len() - 1)
    }

    /// Empties a slot. The last slot, when added since the start and its device kept every
    /// landing, goes altogether:
    /// only that device's keys ever ended there, and they return to where they were before
    /// it joined (so a join and a leave cancel out).
    fn vacate(&mut self, slot: usize) {
        if slot + 1 == self.prefix.len() && slot >= self.base && self.keep[slot] == 1.0 {
            // Without memory for the smaller guide, the slot stays, vacant: as consistent.
            if let Ok(smaller) = guide(&self.prefix[..slot]) {
                self.guide = smaller;
                self.prefix.pop();
                self.nominal.pop();
                self.device.pop();
                self.keep.pop();
                return;
            }
        }
        self.device[slot] = VACANT;
        self.keep[slot] = 0.0;
    }

    /// The vacant slot with the smallest nominal weight at least `weight`.
    fn vacant_for(&self, weight: f64) -> Option<usize> {
        (0..self.device.len())
            .filter(|&s| self.device[s] == VACANT && self.nominal[s] >= weight)
            .min_by(|&a, &b| self.nominal[a].total_cmp(&self.nominal[b]))
    }
}

/// The guide table of prefix sums: four cells per slot, `guide[c]` the first slot whose sum
/// exceeds `c × P ÷ cells`, so a lookup scans about one slot past its cell's first.
fn guide(prefix: &[f64]) -> Result<Vec<u32>, RouteError> {
    let cells = 4 * prefix.len();
    let mut guide = Vec::new();
    guide.try_reserve_exact(cells).map_err(|_| RouteError::Allocation { what: "the guide table" })?;
    let total = prefix.last().copied().unwrap_or(0.0);
    let mut t = 0;
    for c in 0..cells {
        let x = c as f64 * total / cells as f64;
        while t + 1 < prefix.len() && prefix[t] <= x {
            t += 1;
        }
        guide.push(t as u32);
    }
    Ok(guide)
}

/// Assigns keyed items to devices; see the module docs.
///
/// Per-device state is kept as parallel arrays (struct of arrays).
#[derive(Clone, Debug)]
pub struct Allocator {
    mode: Mode,
    slots: Slots,
    /// Each device's slot, or [`VACANT`] once it left.
    slot_of: Vec<usize>,
    /// Fixed per id, for the rendezvous fallback.
    seeds: Vec<u64>,
    weights: Vec<f64>,
    /// `1 / weight`, or `+∞` for a removed device.
    inverse_weights: Vec<f64>,
    loads: Vec<u64>,
    /// Ids of the devices still in, ascending: `digest mod alive.len()` indexes it.
    alive: Vec<usize>,
    /// (load, device) entries; an entry is stale when its load is not the device's current one.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    total_load: u128,
    total_weight: f64,
}

/// The 64 bits of a key's blake3 digest everything else derives from.
pub fn key_hash(key: &[u8]) -> u64 {
    let digest = blake3::hash(key);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// SplitMix64's finaliser: a cheap, well-mixed function of its input.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform draw in the open interval (0, 1) from 53 bits of `z`.
fn unit(z: u64) -> f64 {
    ((z >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

impl Allocator {
    /// An allocator with no devices yet.
    ///
    /// # Errors
    /// A negative or non-finite `epsilon`.
    pub fn new(mode: Mode) -> Result<Allocator, RouteError> {
        if let Mode::Bounded { epsilon } = mode
            && !(epsilon.is_finite() && epsilon >= 0.0)
        {
            return Err(RouteError::Invalid {
                field: "epsilon",
                value: epsilon.to_string(),
                fix: "give a non-negative slack such as 0.25",
            });
        }
        Ok(Allocator {
            mode,
            slots: Slots::default(),
            slot_of: Vec::new(),
            seeds: Vec::new(),
            weights: Vec::new(),
            inverse_weights: Vec::new(),
            loads: Vec::new(),
            alive: Vec::new(),
            heap: BinaryHeap::new(),
            total_load: 0,
            total_weight: 0.0,
        })
    }

    /// An allocator over devices of these weights (ids in order): the fleet it starts with,
    /// whose keys it finds in one step (devices added later cost a jump each, rarely taken).
    ///
    /// # Errors
    /// As [`Allocator::new`] and [`Allocator::add_device`].
    pub fn with_weights(mode: Mode, weights: &[f64]) -> Result<Allocator, RouteError> {
        let mut allocator = Allocator::new(mode)?;
        for &w in weights {
            allocator.add_device(w)?;
        }
        allocator.slots.base = allocator.slots.prefix.len();
        Ok(allocator)
    }

    /// Adds a device of `weight` (its throughput, in any unit); returns its id.
    ///
    /// # Errors
    /// A weight that is not finite and positive, or memory that cannot be allocated.
    pub fn add_device(&mut self, weight: f64) -> Result<usize, RouteError> {
        if !(weight.is_finite() && weight > 0.0) {
            return Err(RouteError::Invalid {
                field: "weight",
                value: weight.to_string(),
                fix: "give a positive throughput",
            });
        }
        let full = |_| RouteError::Allocation { what: "a device" };
        self.slot_of.try_reserve(1).map_err(full)?;
        self.seeds.try_reserve(1).map_err(full)?;
        self.weights.try_reserve(1).map_err(full)?;
        self.inverse_weights.try_reserve(1).map_err(full)?;
        self.loads.try_reserve(1).map_err(full)?;
        self.alive.try_reserve(1).map_err(full)?;
        self.heap.try_reserve(1).map_err(|_| RouteError::Allocation { what: "the load heap" })?;
        let id = self.seeds.len();
        let slot = match self.slots.vacant_for(weight) {
            Some(s) => {
                self.slots.device[s] = id;
                self.slots.keep[s] = weight / self.slots.nominal[s];
                s
            }
            None => self.slots.push(weight, id)?,
        };
        self.slot_of.push(slot);
        self.seeds.push(mix(id as u64 ^ 0x5ca1_ab1e));
        self.weights.push(weight);
        self.inverse_weights.push(1.0 / weight);
        self.loads.push(0);
        self.alive.push(id);
        self.heap.push(Reverse((0, id)));
        self.total_weight += weight;
        Ok(id)
    }

    /// Takes a device out (it keeps its id; its keys move to the others, nothing else moves).
    ///
    /// # Errors
    /// An id that does not exist.
    pub fn remove_device(&mut self, id: usize) -> Result<(), RouteError> {
        let count = self.seeds.len();
        if id >= count {
            return Err(RouteError::DeviceOutOfRange { id, count });
        }
        if let Ok(at) = self.alive.binary_search(&id) {
            self.alive.remove(at);
            let slot = std::mem::replace(&mut self.slot_of[id], VACANT);
            self.slots.vacate(slot);
            self.inverse_weights[id] = f64::INFINITY;
            self.total_weight -= self.weights[id];
            self.total_load -= u128::from(self.loads[id]);
        }
        Ok(())
    }

    /// Devices added so far, removed ones included (ids are `0..count`).
    pub fn device_count(&self) -> usize {
        self.seeds.len()
    }

    /// Whether device `id` is still in.
    pub fn is_alive(&self, id: usize) -> bool {
        self.alive.binary_search(&id).is_ok()
    }

    /// Each device's running load, by id.
    pub fn loads(&self) -> &[u64] {
        &self.loads
    }

    /// Each device's weight, by id.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// Forgets every load (a new window of the stream).
    pub fn clear(&mut self) {
        self.loads.fill(0);
        self.total_load = 0;
        self.rebuild_heap();
    }

    /// Entries in the load heap (stays within a small multiple of the device count).
    pub fn heap_len(&self) -> usize {
        self.heap.len()
    }

    /// The device `key` lands on before any spill or load bound, without changing loads.
    ///
    /// # Errors
    /// [`RouteError::ZeroDevices`] when no device is in.
    pub fn landing(&self, key: &[u8]) -> Result<usize, RouteError> {
        if self.alive.is_empty() {
            return Err(RouteError::ZeroDevices);
        }
        let h = key_hash(key);
        Ok(match self.mode {
            Mode::Landing { .. } => self.alive[(h % self.alive.len() as u64) as usize],
            Mode::Weighted { .. } | Mode::Bounded { .. } => self.chain(h, |_| true),
        })
    }

    /// Assigns an item; `None` for a zero-cost item (nothing to place).
    ///
    /// # Errors
    /// No devices, or a load that would overflow.
    pub fn assign(&mut self, key: &[u8], cost: u64) -> Result<Option<usize>, RouteError> {
        if cost == 0 {
            return Ok(None);
        }
        if self.alive.is_empty() {
            return Err(RouteError::ZeroDevices);
        }
        let h = key_hash(key);
        let chosen = match self.mode {
            Mode::Landing { spill } => {
                let landing = self.alive[(h % self.alive.len() as u64) as usize];
                self.spill_from(landing, spill)
            }
            Mode::Weighted { spill: u64::MAX } => self.chain(h, |_| true),
            Mode::Weighted { spill } => {
                let landing = self.chain(h, |_| true);
                self.spill_from(landing, spill)
            }
            Mode::Bounded { epsilon } => {
                // Each device's cap is its weight's share of (1 + ε) × the total with this item.
                let per_weight = (1.0 + epsilon) * (self.total_load as f64 + cost as f64) / self.total_weight;
                let (loads, weights) = (&self.loads, &self.weights);
                let under = |i: usize| (loads[i] as f64 + cost as f64) <= per_weight * weights[i];
                match self.chain(h, under) {
                    VACANT => self.least_loaded_after(cost),
                    i => i,
                }
            }
        };
        self.charge(chosen, cost)?;
        Ok(Some(chosen))
    }

    /// The first device in the key's chain order that passes `eligible`: each attempt's
    /// landing, kept with its slot's chance; after [`MAX_ATTEMPTS`], weighted rendezvous.
    /// [`VACANT`] if no device passes.
    fn chain(&self, h: u64, eligible: impl Fn(usize) -> bool) -> usize {
        for attempt in 0..MAX_ATTEMPTS {
            let slot = self.slots.land(h, attempt);
            let keep = self.slots.keep[slot];
            if keep == 0.0 || (keep < 1.0 && unit(mix(h ^ !attempt)) >= keep) {
                continue;
            }
            let device = self.slots.device[slot];
            if eligible(device) {
                return device;
            }
        }
        self.rendezvous(h, eligible)
    }

    /// Weighted rendezvous: among devices still in passing `eligible`, the one maximising
    /// `ln(u) / weight` (the order of `−weight / ln(u)`); [`VACANT`] if none.
    ///
    /// `ln(u) ≤ u − 1`, so a device whose `(u − 1) / weight` cannot beat the best so far is
    /// skipped without a logarithm.
    fn rendezvous(&self, h: u64, eligible: impl Fn(usize) -> bool) -> usize {
        let mut best = f64::NEG_INFINITY;
        let mut winner = VACANT;
        for &i in &self.alive {
            let inverse = self.inverse_weights[i];
            let u = unit(mix(h ^ self.seeds[i]));
            if (u - 1.0) * inverse <= best || !eligible(i) {
                continue;
            }
            let score = u.ln() * inverse;
            if score > best {
                best = score;
                winner = i;
            }
        }
        winner
    }

    /// The device whose load per weight is least with `cost` added: where an item too big
    /// for every cap does the least harm.
    fn least_loaded_after(&self, cost: u64) -> usize {
        let per_weight = |i: usize| (self.loads[i] as f64 + cost as f64) * self.inverse_weights[i];
        self.alive.iter().copied().min_by(|&a, &b| per_weight(a).total_cmp(&per_weight(b))).unwrap_or(0)
    }

    /// The landing device, or the least-pressed one when the landing device is pressed more
    /// than `spill` beyond it. Pressure is the load in `Landing` mode and the load per unit
    /// of weight otherwise (`spill` then counts in loads of an average-weight device), so a
    /// fast device's larger share is not mistaken for a hot spot.
    fn spill_from(&mut self, landing: usize, spill: u64) -> usize {
        let least = self.least_pressed();
        let spills = match self.mode {
            Mode::Landing { .. } => self.loads[landing] > self.loads[least].saturating_add(spill),
            Mode::Weighted { .. } | Mode::Bounded { .. } => {
                let mean_weight = self.total_weight / self.alive.len() as f64;
                let per_weight = |i: usize| self.loads[i] as f64 * self.inverse_weights[i];
                per_weight(landing) > per_weight(least) + spill as f64 / mean_weight
            }
        };
        if spills { least } else { landing }
    }

    /// The heap's key of a device still in: its load, or its load per weight as the bits of
    /// a non-negative float (which order like the floats).
    fn pressure(&self, id: usize) -> u64 {
        match self.mode {
            Mode::Landing { .. } => self.loads[id],
            Mode::Weighted { .. } | Mode::Bounded { .. } => {
                (self.loads[id] as f64 * self.inverse_weights[id]).to_bits()
            }
        }
    }

    /// The least-pressed device still in: pops stale heap entries (lazy deletion).
    fn least_pressed(&mut self) -> usize {
        while let Some(&Reverse((key, id))) = self.heap.peek() {
            if self.inverse_weights[id].is_finite() && self.pressure(id) == key {
                return id;
            }
            self.heap.pop();
        }
        // Every entry was stale: rebuild from the current loads.
        self.rebuild_heap();
        self.heap.peek().map_or(self.alive[0], |&Reverse((_, id))| id)
    }

    fn charge(&mut self, id: usize, cost: u64) -> Result<(), RouteError> {
        let load = self.loads[id];
        let new = load.checked_add(cost).ok_or(RouteError::LoadOverflow { device: id, load, cost })?;
        self.loads[id] = new;
        self.total_load += u128::from(cost);
        // Only spilling asks for the least-pressed device.
        if matches!(self.mode, Mode::Bounded { .. } | Mode::Weighted { spill: u64::MAX }) {
            return Ok(());
        }
        self.heap.push(Reverse((self.pressure(id), id)));
        // Compact: stale entries never outnumber the devices by much, whatever the stream's
        // length (a rebuild every ~n pushes is O(1) amortised).
        if self.heap.len() > 2 * self.seeds.len() + 8 {
            self.rebuild_heap();
        }
        Ok(())
    }

    fn rebuild_heap(&mut self) {
        // Reuse the heap's buffer: a rebuild every ~n pushes allocates nothing.
        let mut entries = std::mem::take(&mut self.heap).into_vec();
        entries.clear();
        entries.extend(self.alive.iter().map(|&id| Reverse((self.pressure(id), id))));
        self.heap = BinaryHeap::from(entries);
    }

    /// Loads of the devices still in: (maximum, average).
    pub fn max_and_average(&self) -> (u64, f64) {
        let max = self.alive.iter().map(|&i| self.loads[i]).max().unwrap_or(0);
        (max, self.total_load as f64 / self.alive.len().max(1) as f64)
    }
}

/// Chooses a replica for each keyed request.
pub trait Router {
    /// The replica that serves `key`.
    fn route(&mut self, key: &[u8]) -> usize;
}

/// Requests in turn, one replica after another.
#[derive(Clone, Debug)]
pub struct RoundRobin {
    replicas: usize,
    next: usize,
}

impl RoundRobin {
    pub fn new(replicas: usize) -> RoundRobin {
        RoundRobin { replicas: replicas.max(1), next: 0 }
    }
}

impl Router for RoundRobin {
    fn route(&mut self, _key: &[u8]) -> usize {
        let chosen = self.next % self.replicas;
        self.next = self.next.wrapping_add(1);
        chosen
    }
}

/// Requests by key over replicas weighted by their throughput ([`Mode::Weighted`], no
/// spilling): a request key always reaches the same replica while the replicas stay, and
/// a faster replica serves proportionally more.
#[derive(Clone, Debug)]
pub struct ByThroughput {
    allocator: Allocator,
}

impl ByThroughput {
    /// A router over replicas with these throughputs (any unit).
    ///
    /// # Errors
    /// No replica, or a throughput that is not finite and positive.
    pub fn new(throughputs: &[f64]) -> Result<ByThroughput, RouteError> {
        if throughputs.is_empty() {
            return Err(RouteError::ZeroDevices);
        }
        Ok(ByThroughput { allocator: Allocator::with_weights(Mode::Weighted { spill: u64::MAX }, throughputs)? })
    }
}

impl Router for ByThroughput {
    fn route(&mut self, key: &[u8]) -> usize {
        // Never fails: the replicas are fixed and there is at least one.
        self.allocator.landing(key).unwrap_or(0)
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
