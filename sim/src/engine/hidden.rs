//! The hidden effects of `crate::hidden` in the event loop: a task's speed on a node (its class's
//! affinity for the task's kind, the node's drift, memory-bandwidth contention), and, where speeds
//! can change while tasks compute, each computing task's remaining work followed through every
//! change, its end event moved each time (the earlier one is then stale, `Event::Finish`'s
//! generation). The event loop calls these as methods; only this file imports its parent.

use super::{Event, Sim, compute_us};
use crate::estimates;

impl Sim<'_> {
    /// Compute microseconds of task `g` on node `n` at full speed: its engines and its class's
    /// affinity for the task's kind, no drift and no contention.
    pub(super) fn base_compute_us(&self, g: usize, n: usize) -> u64 {
        let (j, t) = self.task_of[g];
        let task = &self.workload.jobs[j].tasks[t];
        let spec = &self.nodes[n].spec;
        let speed = if self.config.hidden.affinity.is_empty() {
            1.0
        } else {
            let class = &self.config.cluster.classes[spec.class].name;
            self.config.hidden.affinity(class, estimates::kind(&task.name))
        };
        compute_us(task, spec, speed)
    }

    /// The exact compute estimate of task `g` on node `n` if it started computing there now: its
    /// full-speed time times the slowdown it would meet (what the oracle sees; later arrivals
    /// and the next drift phase it cannot know).
    pub(super) fn exact_compute_ms(&self, g: usize, n: usize) -> f64 {
        self.base_compute_us(g, n) as f64 * self.slowdown(g, n, true) / 1e3
    }

    fn memory_bound(&self, g: usize) -> bool {
        let (j, t) = self.task_of[g];
        self.config.hidden.memory_bound(estimates::kind(&self.workload.jobs[j].tasks[t].name))
    }

    fn demand_of(&self, g: usize) -> f64 {
        self.resources(g).cpu.max(1.0)
    }

    /// How many times slower than full speed task `g` computes on node `n` now; `joining`: it
    /// is not computing there yet, so its own demand is added.
    fn slowdown(&self, g: usize, n: usize, joining: bool) -> f64 {
        let hidden = &self.config.hidden;
        if !hidden.varies() {
            return 1.0;
        }
        let node = &self.nodes[n];
        let bound = self.memory_bound(g);
        let demand = node.memory_demand + if joining && bound { self.demand_of(g) } else { 0.0 };
        hidden.drift(n, self.now) * hidden.contention(node.spec.capacity.cpu, demand, bound)
    }

    /// Task `g` starts computing on its node: it joins the node's computing tasks, and its end,
    /// or every task's there if it changes the memory demand, is set.
    pub(super) fn begin_compute(&mut self, g: usize) {
        let r = self.running[g].as_mut().expect("computing tasks are running");
        let n = r.node;
        r.work_left = r.compute_us as f64;
        r.since = self.now;
        self.nodes[n].computing.push(g);
        if self.memory_bound(g) {
            self.nodes[n].memory_demand += self.demand_of(g);
            self.reflow(n);
        } else {
            self.retime(g, n);
        }
    }

    /// Task `g` ends: it leaves its node's computing tasks (the others speed up if it was
    /// memory-bound), and its compute time is what it took.
    pub(super) fn end_compute(&mut self, g: usize) {
        let r = self.running[g].as_mut().expect("a finish event follows a start");
        let n = r.node;
        r.compute_us = self.now - r.compute_at;
        let node = &mut self.nodes[n];
        if let Some(i) = node.computing.iter().position(|&x| x == g) {
            node.computing.swap_remove(i);
        }
        if self.memory_bound(g) {
            let demand = self.demand_of(g);
            let node = &mut self.nodes[n];
            node.memory_demand = (node.memory_demand - demand).max(0.0);
            if node.computing.is_empty() {
                node.memory_demand = 0.0;
            }
            self.reflow(n);
        }
    }

    /// Every task computing on node `n` is retimed at its speed from now on.
    fn reflow(&mut self, n: usize) {
        for i in 0..self.nodes[n].computing.len() {
            let g = self.nodes[n].computing[i];
            self.retime(g, n);
        }
    }

    /// Task `g`'s work done since its last retiming is taken off at the speed it had; its end
    /// is set at the speed it has now.
    fn retime(&mut self, g: usize, n: usize) {
        let rate = 1.0 / self.slowdown(g, n, false);
        let now = self.now;
        let r = self.running[g].as_mut().expect("computing tasks are running");
        r.work_left = (r.work_left - (now - r.since) as f64 * r.rate).max(0.0);
        r.since = now;
        r.rate = rate;
        r.generation += 1;
        let end = now + (r.work_left / rate).ceil() as u64;
        let generation = r.generation;
        self.push(end, Event::Finish(g, generation));
    }

    /// A drift period ends: nodes whose speed changes are retimed, and the next period's end is
    /// awaited while anything is left to happen.
    pub(super) fn phase(&mut self) {
        for n in 0..self.nodes.len() {
            let before = self.config.hidden.drift(n, self.now.saturating_sub(1));
            if before != self.config.hidden.drift(n, self.now) {
                self.reflow(n);
            }
        }
        let busy = !self.events.is_empty() || self.nodes.iter().any(|n| !n.computing.is_empty());
        if let Some(next) = self.config.hidden.next_phase(self.now).filter(|_| busy) {
            self.push(next, Event::Phase);
        }
    }
}
