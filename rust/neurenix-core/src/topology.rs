//! The IPU-Link topology of a system, and the cost of copies between IPUs.
//!
//! The model (documented in `docs/multi-ipu.md`):
//!
//! - `ipu2`/`bow` (IPU-M2000, Bow-2000 and the IPU-PODs built from them) and
//!   `ipu1` (C2 cards): the IPUs form a **ladder** of two rails. IPU `i`
//!   sits on rung `i / 2`; the numbering snakes along the ladder so that
//!   consecutive IPUs are neighbours (0-1 across a rung, 1-2 along a rail,
//!   2-3 across, ...). The two IPUs of a rung are joined by 6 IPU-Links (the
//!   M2000's pairs are joined by six x8 links); each of the 4 remaining
//!   links of a chip's 10 goes along a rail, 2 to each rail neighbour.
//! - `ipu21` (C600 cards): the cards form a **ring**, half of a chip's links
//!   to each neighbour (an assumption: no public figure gives the split).
//!
//! A copy is routed over a shortest path. Copies that run at the same time
//! share the links they cross: a copy takes as long as the busiest link on
//! its path needs for everything routed over it, plus a sync across the IPUs
//! and a fixed latency per extra hop.

use crate::report::SystemInfo;

/// Links across a ladder rung (IPU-M2000: the two IPUs of a pair).
const RUNG_LINKS: u32 = 6;
/// Latency of each hop beyond the first (a guess: no public figure).
const HOP_CYCLES: u64 = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Ladder,
    Ring,
}

/// One copy between two IPUs (model-relative numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub from: u32,
    pub to: u32,
    pub bytes: u64,
}

#[derive(Debug, Clone)]
pub struct Topology {
    pub shape: Shape,
    pub num_ipus: u32,
    /// Bytes per cycle of one IPU-Link, one direction.
    pub link_bytes_per_cycle: f64,
    pub links_per_ipu: u32,
    /// Cost of the sync that ends a copy between IPUs.
    pub sync_cycles: u64,
}

impl Topology {
    pub fn new(system: &SystemInfo, num_ipus: u32, sync_cycles: u64) -> Topology {
        let shape = if system.version == "ipu21" {
            Shape::Ring
        } else {
            Shape::Ladder
        };
        Topology {
            shape,
            num_ipus: num_ipus.max(1),
            link_bytes_per_cycle: system.ipu_link_bytes_per_sec / system.clock_hz,
            links_per_ipu: system.ipu_links.max(1),
            sync_cycles,
        }
    }

    /// Ladder position of IPU `i`: (rung, rail).
    fn position(i: u32) -> (u32, u32) {
        let rung = i / 2;
        let rail = if rung % 2 == 0 { i % 2 } else { 1 - i % 2 };
        (rung, rail)
    }

    fn ipu_at(rung: u32, rail: u32) -> u32 {
        rung * 2 + if rung % 2 == 0 { rail } else { 1 - rail }
    }

    /// IPU-Links joining neighbours `a` and `b` (0 if not neighbours).
    pub fn links_between(&self, a: u32, b: u32) -> u32 {
        match self.shape {
            Shape::Ladder => {
                let (ra, sa) = Self::position(a);
                let (rb, sb) = Self::position(b);
                let rail_links = self.links_per_ipu.saturating_sub(RUNG_LINKS).max(2) / 2;
                if ra == rb && sa != sb {
                    RUNG_LINKS.min(self.links_per_ipu)
                } else if sa == sb && ra.abs_diff(rb) == 1 {
                    rail_links
                } else {
                    0
                }
            }
            Shape::Ring => {
                let n = self.num_ipus;
                let d = a.abs_diff(b);
                if n > 1 && (d == 1 || d == n - 1) {
                    (self.links_per_ipu / 2).max(1)
                } else {
                    0
                }
            }
        }
    }

    /// The directed hops of a shortest route from `a` to `b`.
    pub fn route(&self, a: u32, b: u32) -> Vec<(u32, u32)> {
        let mut hops = Vec::new();
        if a == b {
            return hops;
        }
        match self.shape {
            Shape::Ladder => {
                let (mut rung, rail) = Self::position(a);
                let (rb, sb) = Self::position(b);
                let mut cur = a;
                // Cross the rung first when the target is on the other rail.
                if rail != sb {
                    let next = Self::ipu_at(rung, sb);
                    hops.push((cur, next));
                    cur = next;
                }
                while rung != rb {
                    rung = if rb > rung { rung + 1 } else { rung - 1 };
                    let next = Self::ipu_at(rung, sb);
                    hops.push((cur, next));
                    cur = next;
                }
            }
            Shape::Ring => {
                let n = self.num_ipus.max(b + 1).max(a + 1);
                let fwd = (b + n - a) % n;
                let step_fwd = fwd <= n - fwd;
                let mut cur = a;
                while cur != b {
                    let next = if step_fwd {
                        (cur + 1) % n
                    } else {
                        (cur + n - 1) % n
                    };
                    hops.push((cur, next));
                    cur = next;
                }
            }
        }
        hops
    }

    /// Cycles each of `transfers` takes when they all run at the same time
    /// (sharing the links they cross).
    pub fn cycles(&self, transfers: &[Transfer]) -> Vec<u64> {
        let mut load: std::collections::HashMap<(u32, u32), u64> = Default::default();
        let routes: Vec<Vec<(u32, u32)>> =
            transfers.iter().map(|t| self.route(t.from, t.to)).collect();
        for (t, r) in transfers.iter().zip(&routes) {
            for &h in r {
                *load.entry(h).or_default() += t.bytes;
            }
        }
        routes
            .iter()
            .map(|r| {
                if r.is_empty() {
                    return 0;
                }
                let busiest = r
                    .iter()
                    .map(|&(a, b)| {
                        let bw = (self.links_between(a, b).max(1) as f64
                            * self.link_bytes_per_cycle)
                            .max(1e-9);
                        load.get(&(a, b)).copied().unwrap_or(0) as f64 / bw
                    })
                    .fold(0.0, f64::max);
                // `as` saturates: an absurd copy costs u64::MAX, not a wrap.
                (busiest.ceil() as u64)
                    .saturating_add(self.sync_cycles)
                    .saturating_add(HOP_CYCLES.saturating_mul(r.len() as u64 - 1))
            })
            .collect()
    }

    /// Cycles of one copy alone.
    pub fn copy_cycles(&self, from: u32, to: u32, bytes: u64) -> u64 {
        self.cycles(&[Transfer { from, to, bytes }])[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn system(version: &str) -> SystemInfo {
        SystemInfo {
            version: version.into(),
            clock_hz: 1.0e9,
            ..crate::compile::default_system()
        }
    }

    #[test]
    fn consecutive_ipus_are_neighbours_on_the_ladder() {
        let t = Topology::new(&system("ipu2"), 16, 800);
        for i in 0..15 {
            assert!(t.links_between(i, i + 1) > 0, "{i}-{}", i + 1);
            assert_eq!(t.route(i, i + 1).len(), 1);
        }
        assert_eq!(t.links_between(0, 1), 6);
        assert_eq!(t.links_between(1, 2), 2);
        assert_eq!(t.links_between(0, 2), 0);
        // 0 -> 2: across the rung, then along the rail.
        assert_eq!(t.route(0, 2), vec![(0, 1), (1, 2)]);
        assert_eq!(t.route(0, 3), vec![(0, 3)]);
        // 7 sits on rung 3 of the same rail: three hops along it.
        assert_eq!(t.route(0, 7).len(), 3);
    }

    #[test]
    fn a_pair_gets_only_the_links_between_them() {
        let t = Topology::new(&system("ipu2"), 4, 0);
        let mb = 32 << 20;
        // Across a rung: 6 links of 32 B/cycle; along a rail: 2.
        assert_eq!(
            t.copy_cycles(0, 1, mb),
            (mb as f64 / (6.0 * 32.0)).ceil() as u64
        );
        assert_eq!(t.copy_cycles(1, 2, mb), mb / 64);
        // Not neighbours: the slowest hop plus a hop's latency.
        assert_eq!(t.copy_cycles(0, 2, mb), mb / 64 + HOP_CYCLES);
    }

    #[test]
    fn copies_over_the_same_link_share_it() {
        let t = Topology::new(&system("ipu2"), 4, 0);
        let b = 1 << 20;
        let alone = t.copy_cycles(1, 2, b);
        let both = t.cycles(&[
            Transfer {
                from: 1,
                to: 2,
                bytes: b,
            },
            Transfer {
                from: 0,
                to: 2,
                bytes: b,
            },
        ]);
        assert_eq!(both[0], 2 * alone);
        // Opposite directions do not share.
        let opposite = t.cycles(&[
            Transfer {
                from: 1,
                to: 2,
                bytes: b,
            },
            Transfer {
                from: 2,
                to: 1,
                bytes: b,
            },
        ]);
        assert_eq!(opposite[0], alone);
    }

    #[test]
    fn the_ring_wraps() {
        let t = Topology::new(&system("ipu21"), 8, 0);
        assert_eq!(t.route(0, 7), vec![(0, 7)]);
        assert_eq!(t.route(1, 3).len(), 2);
        assert_eq!(t.links_between(0, 7), 5);
    }
}
