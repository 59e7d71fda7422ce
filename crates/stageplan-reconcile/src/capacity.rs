//! Free capacity per node, derived from the persisted assignments, and the index that finds
//! a node for a stage in O(log n).

use std::collections::{BTreeSet, HashMap};

use crate::spec::{Assignment, Node, Placement, StageRequest};

/// A node and what is left on it.
#[derive(Clone, Debug)]
pub(crate) struct NodeCapacity {
    pub node: Node,
    pub revision: u64,
    pub free_memory: u64,
    /// GPU ids taken, as bits.
    pub taken: u128,
}

impl NodeCapacity {
    fn free_gpus(&self) -> u32 {
        self.node.gpus - self.taken.count_ones()
    }

    fn key(&self, index: usize) -> (u32, u64, usize) {
        (self.free_gpus(), self.free_memory, index)
    }
}

/// Why a persisted assignment cannot be replayed onto its node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unreplayable {
    NodeGone,
    NoRoom,
    GpuTaken,
}

/// Every node's free capacity, indexed for placement: GPU nodes by (free GPUs, free
/// memory), GPU-less nodes (Macs, CPU boxes) by free memory. A stage that asks for GPUs goes
/// to a GPU node and one that asks for none to a GPU-less node: a GPU node's `memory` is
/// its GPUs' memory, not room for stages held in RAM.
#[derive(Clone, Debug, Default)]
pub(crate) struct Capacity {
    nodes: Vec<NodeCapacity>,
    by_name: HashMap<String, usize>,
    gpu: BTreeSet<(u32, u64, usize)>,
    ram: BTreeSet<(u32, u64, usize)>,
}

impl Capacity {
    pub(super) fn new(nodes: impl IntoIterator<Item = (Node, u64)>) -> Capacity {
        let mut capacity = Capacity::default();
        for (node, revision) in nodes {
            let index = capacity.nodes.len();
            capacity.by_name.insert(node.name.clone(), index);
            let entry = NodeCapacity { free_memory: node.memory, taken: 0, node, revision };
            let set = if entry.node.gpus == 0 { &mut capacity.ram } else { &mut capacity.gpu };
            set.insert(entry.key(index));
            capacity.nodes.push(entry);
        }
        capacity
    }

    pub(super) fn get(&self, name: &str) -> Option<&NodeCapacity> {
        self.by_name.get(name).map(|&i| &self.nodes[i])
    }

    pub(super) fn set_revision(&mut self, name: &str, revision: u64) {
        if let Some(&i) = self.by_name.get(name) {
            self.nodes[i].revision = revision;
        }
    }

    fn update(&mut self, index: usize, change: impl FnOnce(&mut NodeCapacity)) {
        let old = self.nodes[index].key(index);
        let set = if self.nodes[index].node.gpus == 0 { &mut self.ram } else { &mut self.gpu };
        set.remove(&old);
        change(&mut self.nodes[index]);
        let new = self.nodes[index].key(index);
        let set = if self.nodes[index].node.gpus == 0 { &mut self.ram } else { &mut self.gpu };
        set.insert(new);
    }

    /// Takes a persisted assignment's memory and exact GPU ids on its node.
    pub(super) fn replay(&mut self, assignment: &Assignment) -> Result<(), Unreplayable> {
        let &index = self.by_name.get(&assignment.node).ok_or(Unreplayable::NodeGone)?;
        let node = &self.nodes[index];
        let mut bits = 0u128;
        for &gpu in &assignment.gpus {
            if gpu >= node.node.gpus || bits & (1 << gpu) != 0 {
                return Err(Unreplayable::NoRoom);
            }
            bits |= 1 << gpu;
        }
        if node.taken & bits != 0 {
            return Err(Unreplayable::GpuTaken);
        }
        if assignment.memory > node.free_memory {
            return Err(Unreplayable::NoRoom);
        }
        self.update(index, |n| {
            n.free_memory -= assignment.memory;
            n.taken |= bits;
        });
        Ok(())
    }

    /// Gives back what `assignment` took (it was replayed or placed).
    pub(super) fn release(&mut self, assignment: &Assignment) {
        let Some(&index) = self.by_name.get(&assignment.node) else { return };
        let bits = assignment.gpus.iter().fold(0u128, |b, &g| if g < 128 { b | (1 << g) } else { b });
        self.update(index, |n| {
            n.free_memory = (n.free_memory + assignment.memory).min(n.node.memory);
            n.taken &= !bits;
        });
    }

    /// Chooses a node for `stage` by `placement`, takes the lowest free GPU ids and the
    /// memory there, and returns the binding; `None` when no node has room.
    pub(super) fn place(&mut self, stage: &StageRequest, placement: Placement) -> Option<Assignment> {
        let (gpus, memory) = (stage.gpus, stage.memory);
        let max_gpus = crate::spec::MAX_GPUS_PER_NODE;
        let bucket = |g: u32| (g, memory, 0)..=(g, u64::MAX, usize::MAX);
        // The plan's GPUs on its machine, when it names them: each there and free.
        let wanted = stage.gpu_ids.iter().fold(0u128, |b, &g| if g < 128 { b | (1 << g) } else { b });
        let pinned = stage.node.as_ref().map(|name| {
            let &index = self.by_name.get(name)?;
            let n = &self.nodes[index];
            let ids_free = stage.gpu_ids.iter().all(|&g| g < n.node.gpus) && n.taken & wanted == 0;
            (n.free_gpus() >= gpus && n.free_memory >= memory && ids_free).then(|| n.key(index))
        });
        let found = match (pinned, placement, gpus) {
            // The plan's machine, or nowhere: the stage's prediction is that machine's.
            (Some(pinned), _, _) => pinned,
            (None, placement, gpus) => match (placement, gpus) {
                // The fullest node that fits: least free memory.
                (Placement::BinPack, 0) => self.ram.range(bucket(0)).next().copied(),
                // The emptiest: most free memory.
                (Placement::Spread, 0) => self.ram.range(bucket(0)).next_back().copied(),
                // The fullest GPU node that fits: fewest free GPUs, then least free memory.
                (Placement::BinPack, _) => (gpus..=max_gpus).find_map(|g| self.gpu.range(bucket(g)).next().copied()),
                // The emptiest: most free GPUs, then most free memory.
                (Placement::Spread, _) => {
                    (gpus..=max_gpus).rev().find_map(|g| self.gpu.range(bucket(g)).next_back().copied())
                }
            },
        };
        let (_, _, index) = found?;
        let mut ids = stage.gpu_ids.clone();
        let mut bits = wanted;
        let taken = self.nodes[index].taken;
        for id in 0..self.nodes[index].node.gpus {
            if ids.len() == gpus as usize {
                break;
            }
            if taken & (1 << id) == 0 {
                ids.push(id);
                bits |= 1 << id;
            }
        }
        self.update(index, |n| {
            n.free_memory -= memory;
            n.taken |= bits;
        });
        Some(Assignment {
            node: self.nodes[index].node.name.clone(),
            layers: stage.layers,
            gpus: ids,
            memory,
            status: crate::spec::Status::Running,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, gib: u64, gpus: u32) -> (Node, u64) {
        (Node { name: name.into(), memory: gib << 30, gpus }, 1)
    }

    #[test]
    fn bin_pack_fills_the_fullest_node_and_spread_the_emptiest() {
        let stage = StageRequest { layers: [0, 1], memory: 10 << 30, gpus: 1, node: None, gpu_ids: Vec::new() };
        let mut capacity = Capacity::new([node("big", 80, 8), node("small", 24, 2)]);
        let first = capacity.place(&stage, Placement::BinPack).unwrap();
        assert_eq!((first.node.as_str(), first.gpus.as_slice()), ("small", &[0][..]));
        let second = capacity.place(&stage, Placement::BinPack).unwrap();
        assert_eq!((second.node.as_str(), second.gpus.as_slice()), ("small", &[1][..]));
        assert_eq!(capacity.place(&stage, Placement::BinPack).unwrap().node, "big");
        let mut capacity = Capacity::new([node("big", 80, 8), node("small", 24, 2)]);
        assert_eq!(capacity.place(&stage, Placement::Spread).unwrap().node, "big");
    }

    #[test]
    fn release_frees_exactly_the_ids_taken() {
        let stage = StageRequest { layers: [0, 1], memory: 1, gpus: 2, node: None, gpu_ids: Vec::new() };
        let mut capacity = Capacity::new([node("n", 8, 4)]);
        let a = capacity.place(&stage, Placement::BinPack).unwrap();
        let b = capacity.place(&stage, Placement::BinPack).unwrap();
        assert_eq!((a.gpus.clone(), b.gpus.clone()), (vec![0, 1], vec![2, 3]));
        assert!(capacity.place(&stage, Placement::BinPack).is_none());
        capacity.release(&a);
        assert_eq!(capacity.place(&stage, Placement::BinPack).unwrap().gpus, vec![0, 1]);
        assert_eq!(capacity.replay(&b), Err(Unreplayable::GpuTaken));
    }
}
