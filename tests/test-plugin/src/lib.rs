//! # gantry-test-plugin
//!
//! A deliberately misbehaving plugin for the host's tests. Its configuration is
//! `{"mode": "<mode>"}` (optionally with `"good_calls": N`: the first N `reserve` calls are
//! answered sanely whatever the mode) and the mode picks the misbehaviour; hooks a mode does not
//! mention behave sanely: `admit`, `order` and `rebalance` emit nothing, `place` does a correct
//! first fit of the non-gang requests and `reserve` is the simple planner of [`reserve`].
//!
//! | mode                 | behaviour                                                          |
//! |----------------------|--------------------------------------------------------------------|
//! | `ok`                 | sane                                                               |
//! | `panic`              | `place` panics with "test plugin panic"                            |
//! | `panic-create`       | `create` panics                                                    |
//! | `error`              | `place` fails with "test plugin error"                             |
//! | `unknown-node`       | `place` puts the first pending request on node 4,000,000,000       |
//! | `unknown-request`    | `place` places request `requests.len() + 7` on node 0              |
//! | `double-alloc`       | `place` puts every remaining container on node 0, ignoring room    |
//! | `partial-gang`       | `place` emits `count - 1` PLACEs for the first pending gang        |
//! | `bad-kind`           | `place` emits a decision of kind 77 for the first pending request  |
//! | `flood`              | `place` emits a first fit plus `3 * (requests.len() + 1)` WAITs    |
//! | `order-garbage`      | `order` emits a duplicate and an out-of-range ORDER                |
//! | `rebalance-kill-all` | `rebalance` kills every container and preempts one out of range    |
//! | `fail-then-ok`       | `place` fails for its first 3 calls, then is sane                  |
//! | `hang`               | `place` never returns                                              |
//! | `slow-then-ok`       | `place` sleeps 1.5 s in its first call, then is sane               |
//! | `checksum`           | every hook fails with a checksum of everything its view shows      |
//! | `reserve-over-capacity` | `reserve` plans the subject at once at `h` bundles, over the plan |
//! | `reserve-outside-window` | `reserve` plans the subject after its deadline                  |
//! | `reserve-broken-order` | `reserve` starts every atom of the subject at one instant         |
//! | `reserve-gang-size`  | `reserve` plans bundles that are not whole gangs (or above `h`)    |
//! | `reserve-past-changed` | REPLAN and OPTIMIZE restate started reservations without their past |
//! | `reserve-flood`      | `reserve` returns over a million allocation pieces                 |
//! | `reserve-bad-allocation` | `reserve` adds a piece of an atom the subject does not have     |
//! | `reserve-panic`      | `reserve` panics with "test plugin panic in reserve"               |
//! | `reserve-hang`       | `reserve` never returns                                            |

use core::ffi::CStr;
use gantry_sdk::abi::{
    GANTRY_NODE_RUNNING, GANTRY_NONE, GANTRY_REQUEST_GANG, GantryDecision, GantryRequest, GantryResources,
};
use gantry_sdk::{Decisions, Hooks, Plugin, PluginError, View};

pub mod reserve;
use reserve::Spoil;

/// Node index used by `unknown-node`: far beyond any test cluster.
pub const UNKNOWN_NODE: u32 = 4_000_000_000;
/// Decision kind used by `bad-kind`: not a `GANTRY_DECISION_*`.
pub const BAD_KIND: u32 = 77;
/// Reason code of the WAIT decisions of `flood`.
pub const FLOOD_REASON: u32 = 42;
/// How many `place` calls fail in `fail-then-ok` mode.
pub const FAILING_CALLS: u32 = 3;
/// How long the first `place` call of `slow-then-ok` takes, ms: well past a test's budget.
pub const SLOW_CALL_MS: u64 = 1500;
/// Start of the message of every `checksum` call; 16 hex digits follow.
pub const CHECKSUM_PREFIX: &str = "view checksum ";

/// How the plugin misbehaves. See the crate documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Sane.
    Ok,
    /// `place` panics.
    Panic,
    /// `create` panics.
    PanicCreate,
    /// `place` returns an error.
    Error,
    /// `place` names a node that does not exist.
    UnknownNode,
    /// `place` names a request that does not exist.
    UnknownRequest,
    /// `place` over-allocates node 0.
    DoubleAlloc,
    /// `place` places a gang partly.
    PartialGang,
    /// `place` emits an unknown decision kind.
    BadKind,
    /// `place` emits many valid decisions.
    Flood,
    /// `order` emits a duplicate and an out-of-range request.
    OrderGarbage,
    /// `rebalance` kills everything and preempts a container that does not exist.
    RebalanceKillAll,
    /// `place` fails for its first calls, then is sane.
    FailThenOk,
    /// `place` never returns.
    Hang,
    /// `place` takes [`SLOW_CALL_MS`] once, then is sane.
    SlowThenOk,
    /// Every hook fails with [`view_checksum`] of its view as the message.
    Checksum,
    /// `reserve` answers spoilt this way ([`Spoil`]).
    Reserve(Spoil),
    /// `reserve` panics.
    ReservePanic,
    /// `reserve` never returns.
    ReserveHang,
}

impl Mode {
    /// Every mode with its configuration name.
    pub const ALL: [(&'static str, Mode); 25] = [
        ("ok", Mode::Ok),
        ("panic", Mode::Panic),
        ("panic-create", Mode::PanicCreate),
        ("error", Mode::Error),
        ("unknown-node", Mode::UnknownNode),
        ("unknown-request", Mode::UnknownRequest),
        ("double-alloc", Mode::DoubleAlloc),
        ("partial-gang", Mode::PartialGang),
        ("bad-kind", Mode::BadKind),
        ("flood", Mode::Flood),
        ("order-garbage", Mode::OrderGarbage),
        ("rebalance-kill-all", Mode::RebalanceKillAll),
        ("fail-then-ok", Mode::FailThenOk),
        ("hang", Mode::Hang),
        ("slow-then-ok", Mode::SlowThenOk),
        ("checksum", Mode::Checksum),
        ("reserve-over-capacity", Mode::Reserve(Spoil::OverCapacity)),
        ("reserve-outside-window", Mode::Reserve(Spoil::OutsideWindow)),
        ("reserve-broken-order", Mode::Reserve(Spoil::BrokenOrder)),
        ("reserve-gang-size", Mode::Reserve(Spoil::GangSize)),
        ("reserve-past-changed", Mode::Reserve(Spoil::PastChanged)),
        ("reserve-flood", Mode::Reserve(Spoil::Flood)),
        ("reserve-bad-allocation", Mode::Reserve(Spoil::BadAllocation)),
        ("reserve-panic", Mode::ReservePanic),
        ("reserve-hang", Mode::ReserveHang),
    ];

    /// The mode called `name`.
    pub fn from_name(name: &str) -> Option<Mode> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|&(_, m)| m)
    }
}

/// Reads the `mode` string of a `{"mode": "<mode>"}` configuration, by hand (no JSON parser):
/// the value must be a plain string without escapes.
fn parse_mode(config: &str) -> Result<Mode, PluginError> {
    let err = |what: &str| PluginError::new(format!("test-misbehave: {what} in config {config:?}"));
    let t = config.trim();
    let Some(body) = t.strip_prefix('{').and_then(|b| b.strip_suffix('}')) else {
        return Err(err("expected a JSON object"));
    };
    let Some(at) = body.find("\"mode\"") else {
        return Err(err("missing \"mode\""));
    };
    let rest = body.get(at + "\"mode\"".len()..).unwrap_or("").trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return Err(err("expected ':' after \"mode\""));
    };
    let Some(rest) = rest.trim_start().strip_prefix('"') else {
        return Err(err("\"mode\" must be a string"));
    };
    let Some(end) = rest.find('"') else {
        return Err(err("unterminated \"mode\" string"));
    };
    let name = rest.get(..end).unwrap_or("");
    if name.contains('\\') {
        return Err(err("escapes are not supported in \"mode\""));
    }
    let after = rest.get(end + 1..).unwrap_or("").trim_start();
    if !(after.is_empty() || after.starts_with(',')) {
        return Err(err("unexpected text after the \"mode\" string"));
    }
    Mode::from_name(name).ok_or_else(|| err(&format!("unknown mode {name:?}")))
}

/// Reads the optional `"good_calls": N` of the configuration (0 when absent), by hand.
fn parse_good_calls(config: &str) -> Result<u32, PluginError> {
    let err = |what: &str| PluginError::new(format!("test-misbehave: {what} in config {config:?}"));
    let Some(at) = config.find("\"good_calls\"") else { return Ok(0) };
    let rest = config.get(at + "\"good_calls\"".len()..).unwrap_or("").trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return Err(err("expected ':' after \"good_calls\""));
    };
    let rest = rest.trim_start();
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest.get(..digits)
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| err("\"good_calls\" must be a whole number"))
}

/// A checksum (FNV-1a, 64 bits) of everything `view` shows: its scalars and every record of
/// every array, through their `Debug` text. Two views give the same checksum when they show the
/// same cluster, wherever their arrays live.
pub fn view_checksum(view: &View<'_>) -> u64 {
    let text = format!("{view:?}");
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// `checksum`'s answer: an error carrying the view's checksum, which the host passes on.
fn checksum_error(view: &View<'_>) -> PluginError {
    PluginError::new(format!("{CHECKSUM_PREFIX}{:016x}", view_checksum(view)))
}

/// The misbehaving plugin.
#[derive(Debug)]
pub struct TestMisbehave {
    mode: Mode,
    /// `place` calls so far (for `fail-then-ok`).
    place_calls: u32,
    /// `reserve` calls so far.
    reserve_calls: u32,
    /// `reserve` calls answered sanely before the mode applies.
    good_calls: u32,
    /// Tentative allocations per node during one `place` call.
    allocated: Vec<GantryResources>,
}

impl TestMisbehave {
    /// The configured mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Copies this call's node allocations into the scratch buffer.
    fn load_allocations(&mut self, view: &View<'_>) {
        self.allocated.clear();
        self.allocated.extend(view.nodes.iter().map(|n| n.allocated));
    }

    /// The first node (at or after `from`) that is running, matches `req`'s selector and has
    /// room for one more container of it, given this call's tentative allocations.
    fn find_node(&self, view: &View<'_>, req: &GantryRequest, from: usize) -> Option<usize> {
        let nodes = view.nodes.get(from..)?;
        (from..).zip(nodes).find_map(|(i, node)| {
            let room = self.allocated.get(i)?.plus(&req.resources);
            (node.state == GANTRY_NODE_RUNNING
                && room.fits_in(&node.capacity)
                && view.node_matches(node, req.selector))
            .then_some(i)
        })
    }

    /// Takes one container of `res` on node `i`.
    fn take(&mut self, i: usize, res: &GantryResources) {
        if let Some(a) = self.allocated.get_mut(i) {
            *a = a.plus(res);
        }
    }

    /// A correct first fit of the pending non-gang requests (gangs are left alone).
    fn first_fit(&mut self, view: &View<'_>, out: &mut Decisions) {
        self.load_allocations(view);
        for &r in view.pending {
            let Some(req) = view.requests.get(r as usize) else {
                continue;
            };
            if req.flags & GANTRY_REQUEST_GANG != 0 {
                continue;
            }
            let mut from = 0;
            for _ in req.placed..req.count {
                let Some(i) = self.find_node(view, req, from) else {
                    break;
                };
                self.take(i, &req.resources);
                out.place(r, i as u32);
                from = i;
            }
        }
    }

    /// `partial-gang`: `count - 1` PLACEs (on nodes with room) for the first pending gang.
    fn partial_gang(&mut self, view: &View<'_>, out: &mut Decisions) {
        self.load_allocations(view);
        let gang = view.pending.iter().find_map(|&r| {
            let req = view.requests.get(r as usize)?;
            (req.flags & GANTRY_REQUEST_GANG != 0 && req.count > req.placed).then_some((r, req))
        });
        let Some((r, req)) = gang else { return };
        let mut from = 0;
        for _ in 0..req.count.saturating_sub(1) {
            let Some(i) = self.find_node(view, req, from) else {
                break;
            };
            self.take(i, &req.resources);
            out.place(r, i as u32);
            from = i;
        }
    }
}

impl Plugin for TestMisbehave {
    const NAME: &'static CStr = c"test-misbehave";
    const VERSION: &'static CStr = c"0.1.0";
    const HOOKS: Hooks = Hooks { admit: true, order: true, place: true, rebalance: true, reserve: true };

    fn create(config: &str) -> Result<Self, PluginError> {
        let mode = parse_mode(config)?;
        if mode == Mode::PanicCreate {
            panic!("test plugin panic in create");
        }
        let good_calls = parse_good_calls(config)?;
        Ok(TestMisbehave { mode, place_calls: 0, reserve_calls: 0, good_calls, allocated: Vec::new() })
    }

    fn admit(&mut self, view: &View<'_>, _out: &mut Decisions) -> Result<(), PluginError> {
        if self.mode == Mode::Checksum {
            return Err(checksum_error(view));
        }
        Ok(())
    }

    fn order(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        if self.mode == Mode::Checksum {
            return Err(checksum_error(view));
        }
        if self.mode == Mode::OrderGarbage {
            if let Some(&first) = view.pending.first() {
                out.order(first);
                out.order(first);
            }
            out.order(u32::try_from(view.requests.len()).unwrap_or(u32::MAX).saturating_add(3));
        }
        Ok(())
    }

    fn place(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.place_calls = self.place_calls.saturating_add(1);
        let first = view.pending.first().copied();
        let requests = u32::try_from(view.requests.len()).unwrap_or(u32::MAX);
        match self.mode {
            Mode::Panic => panic!("test plugin panic"),
            Mode::Hang => loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            },
            Mode::SlowThenOk => {
                if self.place_calls == 1 {
                    std::thread::sleep(std::time::Duration::from_millis(SLOW_CALL_MS));
                }
                self.first_fit(view, out);
            }
            Mode::Checksum => return Err(checksum_error(view)),
            Mode::Error => return Err(PluginError::new("test plugin error")),
            Mode::FailThenOk if self.place_calls <= FAILING_CALLS => {
                return Err(PluginError::new(format!(
                    "test plugin error (fail-then-ok call {} of {FAILING_CALLS})",
                    self.place_calls
                )));
            }
            Mode::UnknownNode => {
                if let Some(r) = first {
                    out.place(r, UNKNOWN_NODE);
                }
            }
            Mode::UnknownRequest => out.place(requests.saturating_add(7), 0),
            Mode::DoubleAlloc => {
                for &r in view.pending {
                    let Some(req) = view.requests.get(r as usize) else {
                        continue;
                    };
                    for _ in req.placed..req.count {
                        out.place(r, 0);
                    }
                }
            }
            Mode::PartialGang => self.partial_gang(view, out),
            Mode::BadKind => {
                if let Some(r) = first {
                    out.push(GantryDecision {
                        kind: BAD_KIND,
                        subject: r,
                        target: GANTRY_NONE,
                        reason: 0,
                        value: 0,
                    });
                }
            }
            Mode::Flood => {
                self.first_fit(view, out);
                // WAITs cycle over the pending requests, so every one names a real request.
                if !view.pending.is_empty() {
                    let n = 3 * (view.requests.len() + 1);
                    for &r in view.pending.iter().cycle().take(n) {
                        out.wait(r, FLOOD_REASON);
                    }
                }
            }
            Mode::Ok
            | Mode::PanicCreate
            | Mode::OrderGarbage
            | Mode::RebalanceKillAll
            | Mode::FailThenOk
            | Mode::Reserve(_)
            | Mode::ReservePanic
            | Mode::ReserveHang => self.first_fit(view, out),
        }
        Ok(())
    }

    fn rebalance(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        if self.mode == Mode::Checksum {
            return Err(checksum_error(view));
        }
        if self.mode == Mode::RebalanceKillAll {
            let containers = u32::try_from(view.containers.len()).unwrap_or(u32::MAX);
            for c in 0..containers {
                out.kill(c);
            }
            out.preempt(containers.saturating_add(1), 1_000);
        }
        Ok(())
    }

    fn reserve(&mut self, view: &View<'_>, out: &mut Decisions) -> Result<(), PluginError> {
        self.reserve_calls = self.reserve_calls.saturating_add(1);
        let mode = if self.reserve_calls <= self.good_calls { Mode::Ok } else { self.mode };
        match mode {
            Mode::Checksum => Err(checksum_error(view)),
            Mode::ReservePanic => panic!("test plugin panic in reserve"),
            Mode::ReserveHang => loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            },
            Mode::Reserve(spoil) => reserve::reserve(view, spoil, out),
            _ => reserve::reserve(view, Spoil::None, out),
        }
    }
}

gantry_sdk::export_plugin!(TestMisbehave);

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_sdk::abi::{
        GANTRY_DECISION_KILL, GANTRY_DECISION_ORDER, GANTRY_DECISION_PLACE, GANTRY_DECISION_PREEMPT,
        GANTRY_DECISION_WAIT, GANTRY_HOOK_PLACE, GantryContainer,
    };
    use gantry_sdk::testkit::ViewBuilder;

    fn cfg(mode: &str) -> String {
        format!("{{\"mode\": \"{mode}\"}}")
    }

    fn plugin(mode: &str) -> TestMisbehave {
        TestMisbehave::create(&cfg(mode)).unwrap()
    }

    /// Two nodes of 4 cores; a plain request for 3 × 2 cores and a gang of 3 × 1 core, both
    /// pending; four empty container records (what the rebalance modes pick from).
    fn cluster() -> ViewBuilder {
        let mut c = ViewBuilder::new(GANTRY_HOOK_PLACE);
        for _ in 0..2 {
            c.node("", GantryResources::new(4000, 1 << 34, 0));
        }
        c.request(0, GantryResources::new(2000, 1 << 30, 0), 3).pending();
        c.request(0, GantryResources::new(1000, 1 << 30, 0), 3).flags(GANTRY_REQUEST_GANG).pending();
        c.containers = vec![GantryContainer::default(); 4];
        c
    }

    fn run(
        hook: fn(&mut TestMisbehave, &View<'_>, &mut Decisions) -> Result<(), PluginError>,
        p: &mut TestMisbehave,
    ) -> Result<Vec<GantryDecision>, PluginError> {
        let c = cluster();
        let mut out = Decisions::new();
        hook(p, &c.view(), &mut out).map(|()| out.as_slice().to_vec())
    }

    fn places(d: &[GantryDecision]) -> Vec<(u32, u32)> {
        d.iter().filter(|d| d.kind == GANTRY_DECISION_PLACE).map(|d| (d.subject, d.target)).collect()
    }

    #[test]
    fn config_parsing() {
        for (name, mode) in Mode::ALL {
            assert_eq!(parse_mode(&cfg(name)), Ok(mode));
        }
        assert_eq!(parse_mode(" {\"other\": 1, \"mode\" :\"flood\" } "), Ok(Mode::Flood));
        assert_eq!(parse_mode("{\"mode\":\"ok\",\"x\":2}"), Ok(Mode::Ok));
        for bad in [
            "",
            "{}",
            "[]",
            "{\"mode\": \"nope\"}",
            "{\"mode\": 3}",
            "{\"mode\": \"ok",
            "{\"mode\" \"ok\"}",
            "{\"mode\": \"o\\k\"}",
            "\"mode\": \"ok\"",
            "{\"mode\": \"ok\" x}",
        ] {
            assert!(TestMisbehave::create(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn panic_create_panics() {
        let r = std::panic::catch_unwind(|| TestMisbehave::create(&cfg("panic-create")));
        assert!(r.is_err());
    }

    #[test]
    fn ok_is_sane() {
        let mut p = plugin("ok");
        assert!(run(TestMisbehave::admit, &mut p).unwrap().is_empty());
        assert!(run(TestMisbehave::order, &mut p).unwrap().is_empty());
        assert!(run(TestMisbehave::rebalance, &mut p).unwrap().is_empty());
        let d = run(TestMisbehave::place, &mut p).unwrap();
        assert_eq!(places(&d), vec![(0, 0), (0, 0), (0, 1)]);
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn panic_and_error() {
        let mut p = plugin("panic");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(TestMisbehave::place, &mut p)));
        let payload = r.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"test plugin panic"));
        assert!(run(TestMisbehave::order, &mut plugin("panic")).is_ok());

        let e = run(TestMisbehave::place, &mut plugin("error")).unwrap_err();
        assert_eq!(e.message, "test plugin error");
    }

    #[test]
    fn garbage_placements() {
        let d = run(TestMisbehave::place, &mut plugin("unknown-node")).unwrap();
        assert_eq!(places(&d), vec![(0, UNKNOWN_NODE)]);
        let d = run(TestMisbehave::place, &mut plugin("unknown-request")).unwrap();
        assert_eq!(places(&d), vec![(2 + 7, 0)]);
        let d = run(TestMisbehave::place, &mut plugin("double-alloc")).unwrap();
        assert_eq!(places(&d), vec![(0, 0), (0, 0), (0, 0), (1, 0), (1, 0), (1, 0)]);
        let d = run(TestMisbehave::place, &mut plugin("partial-gang")).unwrap();
        assert_eq!(places(&d), vec![(1, 0), (1, 0)]);
        let d = run(TestMisbehave::place, &mut plugin("bad-kind")).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].kind, d[0].subject), (BAD_KIND, 0));
    }

    #[test]
    fn flood() {
        let d = run(TestMisbehave::place, &mut plugin("flood")).unwrap();
        assert_eq!(places(&d), vec![(0, 0), (0, 0), (0, 1)]);
        let waits: Vec<_> = d.iter().filter(|d| d.kind == GANTRY_DECISION_WAIT).collect();
        assert_eq!(waits.len(), 3 * (2 + 1));
        assert!(waits.iter().all(|w| w.subject < 2 && w.reason == FLOOD_REASON));
    }

    #[test]
    fn order_garbage() {
        let mut p = plugin("order-garbage");
        let d = run(TestMisbehave::order, &mut p).unwrap();
        assert!(d.iter().all(|d| d.kind == GANTRY_DECISION_ORDER));
        assert_eq!(d.iter().map(|d| d.subject).collect::<Vec<_>>(), vec![0, 0, 2 + 3]);
        assert_eq!(places(&run(TestMisbehave::place, &mut p).unwrap()).len(), 3);
    }

    #[test]
    fn rebalance_kill_all() {
        let mut p = plugin("rebalance-kill-all");
        let d = run(TestMisbehave::rebalance, &mut p).unwrap();
        let kills: Vec<u32> =
            d.iter().filter(|d| d.kind == GANTRY_DECISION_KILL).map(|d| d.subject).collect();
        assert_eq!(kills, vec![0, 1, 2, 3]);
        let preempts: Vec<_> = d.iter().filter(|d| d.kind == GANTRY_DECISION_PREEMPT).collect();
        assert_eq!(preempts.len(), 1);
        assert_eq!(preempts[0].subject, 4 + 1);
    }

    #[test]
    fn checksum_follows_the_view_not_where_it_lives() {
        let c = cluster();
        let copy = c.clone();
        assert_eq!(view_checksum(&c.view()), view_checksum(&copy.view()));
        let mut other = cluster();
        other.containers[3].start_ms = 1;
        assert_ne!(view_checksum(&c.view()), view_checksum(&other.view()), "one field differs");
        let e = run(TestMisbehave::place, &mut plugin("checksum")).unwrap_err();
        assert_eq!(e.message, format!("{CHECKSUM_PREFIX}{:016x}", view_checksum(&c.view())));
        assert!(run(TestMisbehave::rebalance, &mut plugin("checksum")).is_err());
    }

    #[test]
    fn slow_then_ok_places_every_time() {
        let mut p = plugin("slow-then-ok");
        assert_eq!(places(&run(TestMisbehave::place, &mut p).unwrap()).len(), 3, "slow, then sane");
        assert_eq!(places(&run(TestMisbehave::place, &mut p).unwrap()).len(), 3);
    }

    #[test]
    fn fail_then_ok() {
        let mut p = plugin("fail-then-ok");
        for _ in 0..FAILING_CALLS {
            assert!(run(TestMisbehave::place, &mut p).is_err());
        }
        assert_eq!(places(&run(TestMisbehave::place, &mut p).unwrap()).len(), 3);
        assert_eq!(places(&run(TestMisbehave::place, &mut p).unwrap()).len(), 3);
    }
}
