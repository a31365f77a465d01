//! The C reservation planner `plugins/examples/c/earliest_fit.c`, compiled with the system C
//! compiler and called through the real plugin host on hand-built plans: where it places each
//! kind of definition, what it rejects and why, how it replans, and that it answers through the
//! output protocol's retry when the host's buffers are small.

use gantry_engine::Policy;
use gantry_rdl::{Atom, Expr, Window};
use gantry_scheduler::plugin_host::DynamicPlugin;
use gantry_sdk::Decisions;
use gantry_sdk::abi::*;
use gantry_tests::c_plugin;
use gantry_tests::plan::{Piece, PlanFixture};
use std::time::Duration;

/// The plugin's reject reasons (earliest_fit.c).
const NO_ROOM: u32 = 1;
const TOO_BIG: u32 = 2;
const REPLANNED: u32 = 4;

fn planner(budget: Duration) -> DynamicPlugin {
    let path = c_plugin("plugins/examples/c/earliest_fit.c").expect("compile");
    DynamicPlugin::load_budgeted(&path, "{}", budget).expect("load")
}

/// The planner's answer: decisions as (kind, subject, reason) and pieces as (reservation, atom,
/// start, end, bundles).
type Answer = (Vec<(u32, u32, u32)>, Vec<(u32, u32, u64, u64, u64)>);

fn call(plan: &PlanFixture, now: u64, cause: u32, subject: u32, budget: Duration) -> Answer {
    let mut out = Decisions::new();
    planner(budget).call(&plan.view(now, cause, subject), &mut out).expect("reserve");
    (
        out.as_slice().iter().map(|d| (d.kind, d.subject, d.reason)).collect(),
        out.allocations().iter().map(|p| (p.reservation, p.atom, p.start_ms, p.end_ms, p.bundles)).collect(),
    )
}

/// Admits `text` within [0, deadline) at `now` into `plan`; expects a plan and returns its pieces.
fn admit(plan: &mut PlanFixture, text: &str, deadline: u64, now: u64) -> Vec<Piece> {
    let s = plan.add(text, 0, deadline, 0, &[]);
    let (decisions, pieces) = call(plan, now, GANTRY_RESERVE_ADMIT, s, Duration::ZERO);
    assert_eq!(decisions, vec![(GANTRY_DECISION_PLAN_RESERVATION, s, 0)], "{text}");
    assert!(pieces.iter().all(|p| p.0 == s));
    pieces.iter().map(|&(_, atom, start, end, bundles)| (atom, start, end, bundles)).collect()
}

/// Admits `text` and expects a rejection for `reason`.
fn rejected(plan: &mut PlanFixture, text: &str, deadline: u64, reason: u32) {
    let s = plan.add(text, 0, deadline, 0, &[]);
    let (decisions, pieces) = call(plan, 0, GANTRY_RESERVE_ADMIT, s, Duration::ZERO);
    assert_eq!(decisions, vec![(GANTRY_DECISION_REJECT_RESERVATION, s, reason)], "{text}");
    assert!(pieces.is_empty());
}

#[test]
fn one_atom_gets_the_most_gangs_that_fit_at_the_earliest_instant() {
    let mut plan = PlanFixture::new(10);
    assert_eq!(admit(&mut plan, "atom(2c, 1, 4, 1s, 8s)", 60_000, 1000), vec![(0, 1000, 3000, 4)]);
    // g = 3, h = 8: two gangs (8 rounded down to whole gangs; three would fit 10 cores).
    assert_eq!(admit(&mut plan, "atom(1c, 3, 8, 1s, 6s)", 60_000, 0), vec![(0, 0, 1000, 6)]);
    // The lease is longer than the work needs.
    assert_eq!(admit(&mut plan, "atom(1c, 1, 4, 5s, 8s)", 60_000, 0), vec![(0, 0, 5000, 4)]);
}

#[test]
fn accepted_allocations_push_new_work_later_or_thinner() {
    let mut plan = PlanFixture::new(10);
    plan.add("atom(1c, 1, 8, 1s, 80s)", 0, 60_000, 1, &[(0, 0, 10_000, 8)]);
    // 4 bundles fit only after the 8 cores are free...
    assert_eq!(admit(&mut plan, "atom(1c, 1, 4, 1s, 4s)", 60_000, 0), vec![(0, 10_000, 11_000, 4)]);
    // ...which is too late for this deadline: half as many start at once, for twice as long.
    assert_eq!(admit(&mut plan, "atom(1c, 1, 4, 1s, 4s)", 10_500, 0), vec![(0, 0, 2000, 2)]);
    // UPDATE: the subject's own old allocation does not count against its new plan.
    let mut plan = PlanFixture::new(10);
    let s = plan.add("atom(1c, 1, 10, 1s, 20s)", 0, 60_000, 1, &[(0, 30_000, 32_000, 10)]);
    let (decisions, pieces) = call(&plan, 500, GANTRY_RESERVE_UPDATE, s, Duration::ZERO);
    assert_eq!(decisions, vec![(GANTRY_DECISION_PLAN_RESERVATION, s, 0)]);
    assert_eq!(pieces, vec![(s, 0, 500, 2500, 10)]);
}

#[test]
fn operators_place_their_parts_as_the_language_says() {
    let mut plan = PlanFixture::new(10);
    let order = "order(atom(1c, 1, 2, 1s, 2s), atom(1c, 1, 2, 1s, 2s))";
    assert_eq!(admit(&mut plan, order, 60_000, 0), vec![(0, 0, 1000, 2), (1, 1000, 2000, 2)]);
    // `all`: each part from the same start, the second where there is room.
    let all = "all(atom(6c, 1, 1, 1s, 1s), atom(6c, 1, 1, 1s, 1s))";
    assert_eq!(admit(&mut PlanFixture::new(10), all, 60_000, 0), vec![(0, 0, 1000, 1), (1, 1000, 2000, 1)]);
    // `any`: the first part that fits; what a part that did not fit placed is undone.
    let any = "any(order(atom(1c, 1, 1, 1s, 1s), atom(20c, 1, 1, 1s, 1s)), atom(2c, 1, 1, 1s, 1s))";
    assert_eq!(admit(&mut PlanFixture::new(10), any, 60_000, 0), vec![(2, 0, 1000, 1)]);
    // An inner window.
    let window = "order(atom(1c, 1, 1, 1s, 1s), window(30s, 40s, atom(1c, 1, 1, 1s, 1s)))";
    assert_eq!(
        admit(&mut PlanFixture::new(10), window, 60_000, 0),
        vec![(0, 0, 1000, 1), (1, 30_000, 31_000, 1)]
    );
}

#[test]
fn what_cannot_fit_is_rejected_with_its_reason() {
    let mut plan = PlanFixture::new(10);
    rejected(&mut plan, "atom(11c, 1, 1, 1s, 1s)", 60_000, TOO_BIG);
    rejected(&mut plan, "atom(4c, 3, 3, 1s, 3s)", 60_000, TOO_BIG);
    rejected(&mut plan, "atom(1c, 1, 1, 1s, 90s)", 60_000, NO_ROOM);
    plan.add("atom(10c, 1, 1, 1s, 60s)", 0, 60_000, 1, &[(0, 0, 60_000, 1)]);
    rejected(&mut plan, "atom(1c, 1, 1, 1s, 1s)", 60_000, NO_ROOM);
    // Nothing of a rejected `order` stays placed: the first part fits, the second does not.
    let mut plan = PlanFixture::new(10);
    rejected(&mut plan, "order(atom(1c, 1, 1, 1s, 1s), atom(1c, 1, 1, 1s, 90s))", 60_000, NO_ROOM);
}

#[test]
fn replan_gives_up_the_newest_and_moves_what_has_not_started() {
    // 12 cores from 5 s on a 10-core plan; now 2 s.
    let mut plan = PlanFixture::new(10);
    let a = plan.add("atom(1c, 1, 6, 1s, 120s)", 0, 60_000, 1, &[(0, 0, 20_000, 6)]);
    let b = plan.add("atom(1c, 1, 3, 1s, 60s)", 0, 60_000, 2, &[(0, 0, 20_000, 3)]);
    let c = plan.add("atom(1c, 1, 3, 1s, 9s)", 0, 60_000, 3, &[(0, 5000, 8000, 3)]);
    let (decisions, pieces) = call(&plan, 2000, GANTRY_RESERVE_REPLAN, GANTRY_NONE, Duration::ZERO);
    assert_eq!(decisions, vec![(GANTRY_DECISION_PLAN_RESERVATION, c, 0)], "the newest moves, not the others");
    assert_eq!(pieces, vec![(c, 0, 20_000, 23_000, 3)]);
    // The lowest priority goes first: b has started, so it is given up.
    plan.details[c as usize].priority = 5;
    plan.details[a as usize].priority = 5;
    let (decisions, pieces) = call(&plan, 2000, GANTRY_RESERVE_REPLAN, GANTRY_NONE, Duration::ZERO);
    assert_eq!(decisions, vec![(GANTRY_DECISION_REJECT_RESERVATION, b, REPLANNED)]);
    assert!(pieces.is_empty());
    // A plan that fits needs nothing; OPTIMIZE changes nothing.
    plan.capacity.cpu_millis = 12_000;
    assert_eq!(call(&plan, 2000, GANTRY_RESERVE_REPLAN, GANTRY_NONE, Duration::ZERO), (vec![], vec![]));
    assert_eq!(call(&plan, 2000, GANTRY_RESERVE_OPTIMIZE, GANTRY_NONE, Duration::ZERO), (vec![], vec![]));
}

#[test]
fn a_large_replan_comes_through_the_buffer_retry() {
    // 2,200 one-core reservations at [0, 1 s) on a plan cut to 1,000 cores: 1,200 move, more
    // decisions than the 256 and more pieces than the 1,024 slots a first call is offered.
    let mut plan = PlanFixture::new(1000);
    for r in 0..2200u64 {
        plan.add("atom(1c, 1, 1, 1s, 1s)", 0, 60_000, 1 + r, &[(0, 0, 1000, 1)]);
    }
    for budget in [Duration::ZERO, Duration::from_secs(60)] {
        let (decisions, pieces) = call(&plan, 0, GANTRY_RESERVE_REPLAN, GANTRY_NONE, budget);
        assert_eq!(decisions.len(), 1200);
        assert!(decisions.iter().all(|d| d.0 == GANTRY_DECISION_PLAN_RESERVATION && d.1 >= 1000));
        assert_eq!(pieces.len(), 1200);
        let starting_at = |t| pieces.iter().filter(|p| p.2 == t).count();
        assert_eq!((starting_at(1000), starting_at(2000)), (1000, 200), "earliest first");
    }
}

#[test]
fn the_entry_refuses_hosts_older_than_abi_1_3() {
    let path = c_plugin("plugins/examples/c/earliest_fit.c").expect("compile");
    // SAFETY: loading the example plugin runs no initialisers of its own.
    let lib = unsafe { libloading::Library::new(&path) }.expect("open");
    // SAFETY: the entry symbol has exactly this signature (sdk/ABI.md §4).
    let entry = unsafe { lib.get::<GantryEntryV1>(GANTRY_ENTRY_SYMBOL_V1) }.expect("entry");
    // SAFETY: the entry takes two integers and returns a pointer it owns.
    let (v12, v13, v2) = unsafe { (entry(1, 2), entry(1, 3), entry(2, 3)) };
    assert!(v12.is_null() && v2.is_null());
    assert!(!v13.is_null());
}

/// A small deterministic generator (xorshift64*), so that a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    /// A valid definition at most `depth` operators deep; inner windows lie in [at, at + 120 s).
    fn expr(&mut self, depth: u32, at: u64) -> Expr {
        if depth == 0 || self.below(3) == 0 {
            let g = 1 + self.below(3) as u32;
            let lease = 1000 * (1 + self.below(5));
            return Expr::Atom(Atom {
                bundle: GantryResources::new(1000 * (1 + self.below(4)), 1 << 30, 0),
                min_parallel: g,
                max_parallel: g * (1 + self.below(4) as u32),
                min_lease_ms: lease,
                work: u64::from(g) * lease * (1 + self.below(6)),
            });
        }
        let parts = (0..1 + self.below(3)).map(|_| self.expr(depth - 1, at)).collect();
        match self.below(4) {
            0 => Expr::Order(parts),
            1 => Expr::All(parts),
            2 => Expr::Any(parts),
            _ => {
                let start_ms = at + self.below(100_000);
                let end_ms = start_ms + 5000 + self.below(60_000);
                Expr::Window(Window { start_ms, end_ms, inner: Box::new(self.expr(depth - 1, at)) })
            }
        }
    }
}

/// What a node of a checked plan did: complete, and when its pieces start and end.
struct Placed {
    complete: bool,
    span: Option<(u64, u64)>,
}

/// An independent check of one reservation's pieces against the rules the host validates
/// (abi13.md, "Host validation"): window, gang size, lease, work, order.
fn check(e: &Expr, lo: u64, hi: u64, pieces: &[Piece], next_atom: &mut u32) -> Result<Placed, String> {
    match e {
        Expr::Atom(a) => {
            let index = *next_atom;
            *next_atom += 1;
            let mut mine: Vec<Piece> = pieces.iter().copied().filter(|p| p.0 == index).collect();
            mine.sort_by_key(|p| p.1);
            let (g, h) = (u64::from(a.min_parallel), u64::from(a.max_parallel));
            let mut work = 0;
            let mut run: Option<(u64, u64)> = None;
            for (k, &(_, start, end, bundles)) in mine.iter().enumerate() {
                if start < lo || end > hi || start >= end {
                    return Err(format!("atom {index}: [{start}, {end}) outside [{lo}, {hi})"));
                }
                if bundles == 0 || bundles % g != 0 || bundles > h {
                    return Err(format!("atom {index}: {bundles} bundles, g {g}, h {h}"));
                }
                if k > 0 && start < mine[k - 1].2 {
                    return Err(format!("atom {index}: its pieces overlap"));
                }
                work += bundles * (end - start);
                run = match run {
                    Some((s, e)) if e == start => Some((s, end)),
                    Some((s, e)) if e - s < a.min_lease_ms => return Err(format!("atom {index}: short run")),
                    _ => Some((start, end)),
                };
            }
            if run.is_some_and(|(s, e)| e - s < a.min_lease_ms) {
                return Err(format!("atom {index}: short run"));
            }
            let span = mine.first().zip(mine.last()).map(|(f, l)| (f.1, l.2));
            Ok(Placed { complete: work >= a.work, span })
        }
        Expr::Window(w) => check(&w.inner, lo.max(w.start_ms), hi.min(w.end_ms), pieces, next_atom),
        Expr::Order(parts) | Expr::All(parts) | Expr::Any(parts) => {
            let mut placed = Vec::new();
            for p in parts {
                placed.push(check(p, lo, hi, pieces, next_atom)?);
            }
            if let Expr::Order(_) = e {
                let spans: Vec<(u64, u64)> = placed.iter().filter_map(|p| p.span).collect();
                if spans.windows(2).any(|w| w[1].0 < w[0].1) {
                    return Err("order broken".into());
                }
            }
            let complete = match e {
                Expr::Any(_) => placed.iter().any(|p| p.complete),
                _ => placed.iter().all(|p| p.complete),
            };
            let spans = placed.iter().filter_map(|p| p.span);
            let span = spans.clone().map(|s| s.0).min().zip(spans.map(|s| s.1).max());
            Ok(Placed { complete, span })
        }
    }
}

/// Whether every accepted piece of `plan` together fits its capacity from `now` on.
fn fits_from(plan: &PlanFixture, now: u64) -> bool {
    let mut events: Vec<(u64, bool, GantryResources)> = Vec::new();
    for p in plan.allocations.iter().filter(|p| p.end_ms > now) {
        let d = &plan.details[p.reservation as usize];
        let expr = gantry_rdl::abi::from_nodes(&plan.nodes, d.definition).expect("nodes");
        let used = expr.atoms()[p.atom as usize].bundle.times(p.bundles as u32);
        events.push((p.start_ms.max(now), true, used));
        events.push((p.end_ms, false, used));
    }
    events.sort_by_key(|e| (e.0, e.1));
    let mut level = GantryResources::default();
    events.into_iter().all(|(_, add, used)| {
        level = if add { level.plus(&used) } else { level.minus(&used) };
        level.fits_in(&plan.capacity)
    })
}

/// A reservation of the random plan: definition, arrival, deadline, accepted at, pieces.
type Held = (Expr, u64, u64, u64, Vec<Piece>);

fn fixture(cores: u64, held: &[Held]) -> PlanFixture {
    let mut plan = PlanFixture::new(cores);
    for (expr, arrival, deadline, accepted, pieces) in held {
        plan.add_expr(expr.clone(), *arrival, *deadline, *accepted, pieces);
    }
    plan
}

fn check_held(h: &Held) -> Result<Placed, String> {
    let wrapped = Expr::Window(Window { start_ms: h.1, end_ms: h.2, inner: Box::new(h.0.clone()) });
    check(&wrapped, 0, u64::MAX, &h.4, &mut 0)
}

#[test]
fn random_plans_keep_every_rule() {
    let mut p = planner(Duration::ZERO);
    for seed in 1..=4u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let (mut held, mut accepted, mut now) = (Vec::<Held>::new(), 0, 0u64);
        for _ in 0..120 {
            now += rng.below(4000);
            held.retain(|h| h.2 > now);
            let expr = rng.expr(3, now);
            let mut plan = fixture(10, &held);
            let s = plan.add_expr(expr.clone(), now, now + 120_000, 0, &[]);
            let mut out = Decisions::new();
            p.call(&plan.view(now, GANTRY_RESERVE_ADMIT, s), &mut out).expect("reserve");
            let d = out.as_slice();
            assert_eq!((d.len(), d[0].subject), (1, s), "seed {seed}: one decision about the subject");
            if d[0].kind == GANTRY_DECISION_REJECT_RESERVATION {
                assert!([NO_ROOM, TOO_BIG].contains(&d[0].reason), "seed {seed}: {:?}", d[0]);
                continue;
            }
            let pieces: Vec<Piece> =
                out.allocations().iter().map(|a| (a.atom, a.start_ms, a.end_ms, a.bundles)).collect();
            assert!(pieces.iter().all(|p| p.1 >= now), "seed {seed}: nothing starts before now");
            let h = (expr, now, now + 120_000, now.max(1), pieces);
            let placed = check_held(&h).unwrap_or_else(|e| panic!("seed {seed}: {e}: {h:?}"));
            assert!(placed.complete, "seed {seed}: incomplete: {h:?}");
            held.push(h);
            accepted += 1;
            assert!(fits_from(&fixture(10, &held), now), "seed {seed}: over capacity");
        }
        assert!(accepted >= 30, "seed {seed}: only {accepted} of 120 accepted: the check is too weak");

        // The capacity drops to 6 cores: the answer leaves a plan that fits, moves only what has
        // not started (to valid plans from now on) and keeps everything else as it was.
        let plan = fixture(6, &held);
        let mut out = Decisions::new();
        p.call(&plan.view(now, GANTRY_RESERVE_REPLAN, GANTRY_NONE), &mut out).expect("replan");
        let overcommitted = !fits_from(&plan, now);
        let mut after = held.clone();
        for d in out.as_slice() {
            let r = d.subject as usize;
            if d.kind == GANTRY_DECISION_REJECT_RESERVATION {
                assert_eq!(d.reason, REPLANNED);
                after[r].4.clear();
                continue;
            }
            assert!(held[r].4.iter().all(|p| p.1 >= now), "seed {seed}: a started reservation moved");
            let pieces = out.allocations().iter().filter(|a| a.reservation as usize == r);
            after[r].4 = pieces.map(|a| (a.atom, a.start_ms, a.end_ms, a.bundles)).collect();
            assert!(after[r].4.iter().all(|p| p.1 >= now));
            assert!(check_held(&after[r]).is_ok_and(|p| p.complete), "seed {seed}: moved badly");
        }
        assert_eq!(
            out.as_slice().is_empty(),
            !overcommitted,
            "seed {seed}: answers only an overcommitted plan"
        );
        assert!(fits_from(&fixture(6, &after), now), "seed {seed}: still over capacity after the replan");
    }
}

#[test]
fn a_malformed_plan_is_an_error_not_a_crash() {
    let (mut plan, s) = (PlanFixture::new(10), 0);
    plan.add("order(atom(1c, 1, 1, 1s, 1s), atom(1c, 1, 1, 1s, 1s))", 0, 60_000, 0, &[]);
    type Breakage = fn(&mut PlanFixture);
    let breakages: [(&str, Breakage); 5] = [
        ("an unknown kind", |p| p.nodes[1].kind = 9),
        ("children out of range", |p| p.nodes[1].children.len = 40),
        ("children that loop", |p| p.nodes[1].children = GantryRange { start: 0, len: 2 }),
        ("an atom index out of range", |p| p.nodes[3].atom = 7),
        ("a piece of no atom", |p| {
            p.allocations.push(GantryAllocation {
                reservation: 0,
                atom: 9,
                start_ms: 0,
                end_ms: 1,
                bundles: 1,
            })
        }),
    ];
    let mut p = planner(Duration::ZERO);
    for (what, breakage) in breakages {
        let mut broken = plan.clone();
        breakage(&mut broken);
        let err = p.call(&broken.view(0, GANTRY_RESERVE_ADMIT, s), &mut Decisions::new()).expect_err(what);
        assert!(
            matches!(&err, gantry_engine::PolicyError::Failed(m) if m.starts_with("code -5: ") && m.contains("malformed")),
            "{what}: {err:?}"
        );
    }
    // The subject must be a reservation of the view.
    let err = p.call(&plan.view(0, GANTRY_RESERVE_ADMIT, 5), &mut Decisions::new()).expect_err("subject");
    assert!(format!("{err:?}").contains("not a reservation of the view"), "{err:?}");
}
