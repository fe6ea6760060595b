//! What an assignment puts on each candidate GPU (members and memory), kept as members move, so
//! that the searches check a GPU's room in O(1).

use super::objective::Problem;

/// Members and memory taken on each candidate by one assignment.
#[derive(Clone, Debug)]
pub(super) struct Load {
    count: Vec<usize>,
    memory: Vec<u64>,
}

impl Load {
    pub(super) fn empty(p: &Problem) -> Load {
        Load { count: vec![0; p.gpus().len()], memory: vec![0; p.gpus().len()] }
    }

    pub(super) fn of(p: &Problem, assignment: &[usize]) -> Load {
        let mut load = Load::empty(p);
        for (i, &g) in assignment.iter().enumerate() {
            load.add(p, i, g);
        }
        load
    }

    /// How many members are on GPU g.
    pub(super) fn members_on(&self, g: usize) -> usize {
        self.count[g]
    }

    pub(super) fn fits(&self, p: &Problem, i: usize, g: usize) -> bool {
        p.fits(i, g, self.count[g], self.memory[g])
    }

    pub(super) fn add(&mut self, p: &Problem, i: usize, g: usize) {
        self.count[g] += 1;
        self.memory[g] += p.members()[i].gpu_memory;
    }

    pub(super) fn remove(&mut self, p: &Problem, i: usize, g: usize) {
        self.count[g] -= 1;
        self.memory[g] -= p.members()[i].gpu_memory;
    }

    /// Whether member i, now on GPU `x[i]`, and member j, now on another GPU, can trade places.
    pub(super) fn swap_fits(&self, p: &Problem, x: &[usize], i: usize, j: usize) -> bool {
        let (mi, mj) = (p.members()[i].gpu_memory, p.members()[j].gpu_memory);
        let (gi, gj) = (x[i], x[j]);
        self.memory[gj] - mj + mi <= p.gpus()[gj].free_memory && self.memory[gi] - mi + mj <= p.gpus()[gi].free_memory
    }
}
