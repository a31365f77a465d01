//! spread: put each container on the running node with the most free CPU, at most
//! `max_per_node` containers per node in one call. The SDK's `Feasibility` applies the host's
//! rules (node running, selector, room, queue maximums, gangs, racks), so the plugin only ranks.

use gantry_sdk::{Decisions, Feasibility, Hooks, Plugin, PluginError, View};
use std::cmp::Reverse;

/// WAIT reason code: no set of nodes takes this gang whole now.
pub const WAIT_GANG: u32 = 1;

pub struct Spread {
    /// At most this many containers per node and call (config `max_per_node`).
    max_per_node: u32,
    /// Scratch for one call, kept to reuse the allocation: containers placed per node.
    given: Vec<u32>,
}

impl Plugin for Spread {
    const NAME: &'static core::ffi::CStr = c"spread";
    const VERSION: &'static core::ffi::CStr = c"0.1.0";
    const HOOKS: Hooks = Hooks { place: true, ..Hooks::NONE };

    fn create(config: &str) -> Result<Self, PluginError> {
        let v: serde_json::Value =
            serde_json::from_str(config).map_err(|e| PluginError::new(format!("bad config: {e}")))?;
        let max_per_node = match v.get("max_per_node") {
            None => u32::MAX,
            Some(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| PluginError::new("max_per_node must be a positive integer"))?,
        };
        Ok(Spread { max_per_node, given: Vec::new() })
    }

    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        // Everything this call places, so that each check sees the earlier placements.
        let mut fit = Feasibility::new(view);
        self.given.clear();
        self.given.resize(view.nodes.len(), 0);
        let nodes = 0..view.nodes.len() as u32;
        for &r in view.pending {
            if fit.is_gang(r) {
                // A gang goes whole: one member on each of the `count` roomiest nodes.
                let Some(req) = view.requests.get(r as usize) else { continue };
                let mut chosen: Vec<u32> = nodes
                    .clone()
                    .filter(|&n| self.given[n as usize] < self.max_per_node && fit.check_node(r, n).is_ok())
                    .collect();
                chosen.sort_by_key(|&n| (Reverse(fit.room(n).cpu_millis), n));
                chosen.truncate(req.count as usize);
                if fit.try_place_gang(r, &chosen).is_ok() {
                    for n in chosen {
                        self.given[n as usize] += 1;
                        out.place(r, n);
                    }
                } else {
                    out.wait(r, WAIT_GANG);
                }
                continue;
            }
            while fit.left(r) > 0 {
                let best = nodes
                    .clone()
                    .filter(|&n| self.given[n as usize] < self.max_per_node && fit.check(r, n).is_ok())
                    .max_by_key(|&n| (fit.room(n).cpu_millis, Reverse(n)));
                let Some(n) = best else { break };
                if fit.try_place(r, n).is_err() {
                    break; // cannot happen: `check` just said yes
                }
                self.given[n as usize] += 1;
                out.place(r, n);
            }
        }
        Ok(())
    }
}

gantry_sdk::export_plugin!(Spread);
