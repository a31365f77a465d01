//! Whole rounds of the policy on hand-built views (the arithmetic alone is in `amounts.rs`).

use super::*;
use crate::testkit::{Cluster, gib};

fn cfg() -> PreemptionConfig {
    PreemptionConfig::default()
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-9 * (1.0 + b.abs()), "{a} vs {b}");
}

/// Ten nodes of 10 GiB (the seed's 10-node cluster, 100 GiB): queue A 80 % and B 20 %, both
/// with a maximum of 100 %.
fn seed_cluster() -> (Cluster, u32, u32) {
    let mut c = Cluster::of_nodes(10, gib(10));
    let a = c.queue("root.a", 0, 0.8, 1.0);
    let b = c.queue("root.b", 0, 0.2, 1.0);
    (c, a, b)
}

#[test]
fn the_seeds_first_scenario_round_by_round() {
    // B fills the cluster with one app of 100 × 1 GiB containers; A asks for 100 × 1 GiB.
    let (mut c, a, b) = seed_cluster();
    let app_b = c.app(b, 0);
    for i in 0..100 {
        c.container(app_b, i % 10, gib(1), i as u64, false);
    }
    let app_a = c.app(a, 400_000);
    c.pending(app_a, gib(1), 100, &[]);
    let v = c.view();
    let p = plan(&v, &cfg(), |_| false, |_| 0.0);
    let g = |x: f64| x / gib(1).memory_bytes as f64;
    // Ideal: A 80, B 20 (see ideal.rs). B is 80 over; bound 10 → ×0.2 → 2 GiB this round.
    close(g(p.queues[a as usize].ideal), 80.0);
    close(g(p.queues[b as usize].ideal), 20.0);
    close(g(p.queues[b as usize].to_preempt), 2.0);
    close(g(p.need), 80.0);
    // The two newest containers of B (started at 99 and 98).
    assert_eq!(p.victims, vec![99, 98]);
    close(g(p.queues[b as usize].selected), 2.0);

    // With the bound at 1.0 (the seed's second experiment): 80 × 0.2 = 16 containers.
    let c1 = PreemptionConfig { total_preemption_per_round: 1.0, ..cfg() };
    let p = plan(&v, &c1, |_| false, |_| 0.0);
    assert_eq!(p.victims, (84..100).rev().collect::<Vec<u32>>());
}

#[test]
fn a_queue_at_or_under_its_guarantee_loses_nothing() {
    // A holds exactly its 80 and wants 50 more; B holds its 20 and wants 50 more. Nobody is
    // over its ideal (80 / 20), so nothing is selected — however greedy the settings.
    let (mut c, a, b) = seed_cluster();
    let app_a = c.app(a, 0);
    let app_b = c.app(b, 0);
    for i in 0..80 {
        c.container(app_a, i % 10, gib(1), i as u64, false);
    }
    for i in 0..20 {
        c.container(app_b, i % 10, gib(1), 100 + i as u64, false);
    }
    c.pending(app_a, gib(1), 50, &[]);
    c.pending(app_b, gib(1), 50, &[]);
    let greedy = PreemptionConfig {
        total_preemption_per_round: 1.0,
        natural_termination_factor: 1.0,
        max_ignored_over_capacity: 0.0,
        ..cfg()
    };
    let p = plan(&c.view(), &greedy, |_| false, |_| 0.0);
    assert!(p.victims.is_empty());
    assert_eq!(p.queues.iter().map(|q| q.to_preempt).sum::<f64>(), 0.0);
}

#[test]
fn never_below_the_guarantee_even_when_rounding_up() {
    // A (80) fills nodes 0-6 and half of node 7: 75 GiB, and asks for 30 more. B (20) holds
    // 25: 5 GiB on node 7, 10 GiB on nodes 8 and 9. Ideal: A 80, B 20 (λ = 1), so B is 5
    // over, and greedy settings ask all 5 back; A lacks 5 and nothing is free → need 5.
    // B's newest container (10 GiB) would leave it at 15, under its guarantee: skipped. The
    // 5 GiB one leaves exactly 20: taken.
    let (mut c, a, b) = seed_cluster();
    let app_a = c.app(a, 0);
    for i in 0..75 {
        c.container(app_a, (i / 10) as u32, gib(1), i as u64, false);
    }
    let app_b = c.app(b, 0);
    c.container(app_b, 7, gib(5), 200, false); // index 75
    c.container(app_b, 8, gib(10), 300, false); // 76: newest
    c.container(app_b, 9, gib(10), 100, false); // 77
    c.pending(app_a, gib(1), 30, &[]);
    let greedy = PreemptionConfig {
        total_preemption_per_round: 1.0,
        natural_termination_factor: 1.0,
        max_ignored_over_capacity: 0.0,
        ..cfg()
    };
    let p = plan(&c.view(), &greedy, |_| false, |_| 0.0);
    assert_eq!(p.victims, vec![75]);
}

fn greedy() -> PreemptionConfig {
    PreemptionConfig {
        total_preemption_per_round: 1.0,
        natural_termination_factor: 1.0,
        max_ignored_over_capacity: 0.0,
        ..cfg()
    }
}

fn in_gib(x: f64) -> f64 {
    x / gib(1).memory_bytes as f64
}

/// The seed's second scenario's queues, A 40 %, B 20 %, C 40 % of 100 GiB. B has two apps and
/// holds 70, A holds 30 and wants 30 more, C arrives wanting 40.
/// The issue's case: 100 containers of 1 GiB on 10 nodes; A/B/C guaranteed 55/25/20. B holds
/// 54, C 46, A asks for 10, nothing is free.
fn issue_cluster() -> (Cluster, [u32; 3]) {
    let mut c = Cluster::of_nodes(10, gib(10));
    let a = c.queue("root.a", 0, 0.55, 1.0);
    let b = c.queue("root.b", 0, 0.25, 1.0);
    let q_c = c.queue("root.c", 0, 0.20, 1.0);
    let (app_b, app_c) = (c.app(b, 0), c.app(q_c, 1));
    for i in 0..100u32 {
        c.container(if i < 54 { app_b } else { app_c }, i / 10, gib(1), u64::from(i), false);
    }
    let app_a = c.app(a, 2);
    c.pending(app_a, gib(1), 10, &[]);
    (c, [a, b, q_c])
}

#[test]
fn a_queue_below_its_guarantee_gets_it_back_from_every_queue_past_the_dead_zone() {
    // Ideal: A 10 (its demand), B and C share the other 90 by guarantee, 50 and 40. B (54) is
    // inside a dead zone measured against its ideal (54 ≤ 55) but not against its guarantee
    // (54 > 27.5): YARN takes 4 from B and 6 from C, and so does this, once the pace allows.
    let (mut c, [a, b, q_c]) = issue_cluster();
    let v = c.view();
    let p = plan(&v, &greedy(), |_| false, |_| 0.0);
    for (q, want) in [(a, 10.0), (b, 50.0), (q_c, 40.0)] {
        close(in_gib(p.queues[q as usize].ideal), want);
    }
    let from = |q: u32| {
        p.victims.iter().filter(|&&i| v.apps[v.containers[i as usize].app as usize].queue == q).count()
    };
    assert_eq!((from(b), from(q_c)), (4, 6), "{:?}", p.victims);
    // With YARN's defaults the first round asks 10 × 0.2 = 2 in all (0.8 and 1.2): one of
    // C's; the fractions carry over.
    let p = plan(&v, &cfg(), |_| false, |_| 0.0);
    close(in_gib(p.queues[b as usize].to_preempt), 0.8);
    close(in_gib(p.queues[q_c as usize].to_preempt), 1.2);
    assert_eq!(p.victims.len(), 1);
    close(in_gib(p.queues[b as usize].carry), 0.8);
    close(in_gib(p.queues[q_c as usize].carry), 0.2);
}

#[test]
fn a_queue_whose_preemption_is_disabled_keeps_what_it_holds() {
    // The issue's case with C's preemption disabled (YARN's `disable_preemption`): C keeps its
    // 46, A and B share the other 54 — A 10, B 44 — and B gives A all 10.
    let (mut c, [a, b, q_c]) = issue_cluster();
    let v = c.view();
    let config = PreemptionConfig { disable_preemption: vec!["root.c".into()], ..greedy() };
    let p = plan(&v, &config, |_| false, |_| 0.0);
    for (q, want) in [(a, 10.0), (b, 44.0), (q_c, 46.0)] {
        close(in_gib(p.queues[q as usize].ideal), want);
    }
    let queues: Vec<u32> =
        p.victims.iter().map(|&i| v.apps[v.containers[i as usize].app as usize].queue).collect();
    assert_eq!(queues, vec![b; 10]);
    // Disabled on the root: the whole tree keeps what it holds; A waits.
    let config = PreemptionConfig { disable_preemption: vec!["root".into()], ..greedy() };
    assert!(plan(&v, &config, |_| false, |_| 0.0).victims.is_empty());
}

#[test]
fn three_queues_amounts_and_victims() {
    let mut c = Cluster::of_nodes(10, gib(10));
    let a = c.queue("root.a", 0, 0.4, 1.0);
    let b = c.queue("root.b", 0, 0.2, 1.0);
    let q_c = c.queue("root.c", 0, 0.4, 1.0);
    let app_a = c.app(a, 0);
    for i in 0..30 {
        c.container(app_a, i / 10, gib(1), i as u64, false); // nodes 0-2: indexes 0..30
    }
    let b1 = c.app(b, 10);
    let b2 = c.app(b, 20);
    for i in 0..40 {
        c.container(b1, 3 + i / 10, gib(1), 100 + i as u64, false); // nodes 3-6: 30..70
    }
    for i in 0..30 {
        c.container(b2, 7 + i / 10, gib(1), 200 + i as u64, false); // nodes 7-9: 70..100
    }
    c.pending(app_a, gib(1), 30, &[]);
    let app_c = c.app(q_c, 500);
    c.pending(app_c, gib(1), 40, &[]);
    let v = c.view();
    // A: floor min(30, 40) = 30, cap 60; B: floor 20, cap 70; C: floor 0, cap 40.
    // λ = 1 gives 40 + 20 + 40 = 100: ideal A 40, B 20, C 40.
    let p = plan(&v, &cfg(), |_| false, |_| 0.0);
    let ideal: Vec<f64> = p.queues.iter().map(|q| in_gib(q.ideal)).collect();
    for (got, want) in ideal.iter().zip([100.0, 40.0, 20.0, 40.0]) {
        close(*got, want);
    }
    // B is 50 over (70 > 20 × 1.1). Bound 10 → ×0.2 → 2 GiB; need = lack 10 + 40 − free 0.
    close(in_gib(p.queues[b as usize].to_preempt), 2.0);
    close(in_gib(p.need), 50.0);
    assert_eq!(in_gib(p.queues[a as usize].to_preempt), 0.0);
    // The newest app of B (b2), its newest containers.
    assert_eq!(p.victims, vec![99, 98]);

    // Greedy: all 50 — b2's 30 newest first, then b1's 20 newest; B keeps b1's 20 oldest.
    let p = plan(&v, &greedy(), |_| false, |_| 0.0);
    let want: Vec<u32> = (70..100).rev().chain((50..70).rev()).collect();
    assert_eq!(p.victims, want);
    close(in_gib(p.queues[b as usize].selected), 50.0);
}

/// root → prod 60 % {etl 50 %, web 50 %}, dev 40 % {a 75 %, b 25 %} on 200 GiB: guarantees
/// etl 60, web 60, a 60, b 20.
#[test]
fn nested_queues_amounts() {
    let mut c = Cluster::of_nodes(20, gib(10));
    let prod = c.queue("root.prod", 0, 0.6, 1.0);
    let dev = c.queue("root.dev", 0, 0.4, 1.0);
    let etl = c.queue("root.prod.etl", prod, 0.5, 1.0);
    let web = c.queue("root.prod.web", prod, 0.5, 1.0);
    let qa = c.queue("root.dev.a", dev, 0.75, 1.0);
    let qb = c.queue("root.dev.b", dev, 0.25, 1.0);
    // b holds 120 (nodes 0-11), a 40 (nodes 12-15), web 40 (nodes 16-19); etl wants 100.
    let (ab, aa, aw, ae) = (c.app(qb, 0), c.app(qa, 0), c.app(web, 0), c.app(etl, 0));
    for i in 0..200u32 {
        let app = if i < 120 {
            ab
        } else if i < 160 {
            aa
        } else {
            aw
        };
        c.container(app, i / 10, gib(1), u64::from(i), false);
    }
    c.pending(ae, gib(1), 100, &[]);
    let v = c.view();
    let p = plan(&v, &cfg(), |_| false, |_| 0.0);
    // Top: prod floor min(40, 120) = 40, cap 140; dev floor min(160, 80) = 80, cap 160;
    //   λ = 1: prod 120, dev 80.
    // prod: web holds 40 and wants nothing (floor = cap = 40); etl takes the other 80.
    // dev: a holds 40, wants nothing (40); b floor 20 gets the other 40.
    let ideal: Vec<f64> = p.queues.iter().map(|q| in_gib(q.ideal)).collect();
    for (got, want) in ideal.iter().zip([200.0, 120.0, 80.0, 80.0, 40.0, 40.0, 40.0]) {
        close(*got, want);
    }
    // Only b is over (120 > 44): 80 over; bound 20 → ×0.2 → 4. etl lacks 80, nothing free.
    let to_preempt: Vec<f64> = p.queues.iter().map(|q| in_gib(q.to_preempt)).collect();
    assert_eq!(to_preempt, vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0]);
    close(in_gib(p.need), 80.0);
    assert_eq!(p.victims, vec![119, 118, 117, 116]);
    // Greedy: b gives all 80 and keeps 40 (its ideal; more than its guarantee of 20, because
    // its sibling a leaves part of dev's share unused). a and web (under their guarantee)
    // lose nothing.
    let p = plan(&v, &greedy(), |_| false, |_| 0.0);
    assert_eq!(p.victims, (40..120).rev().collect::<Vec<u32>>());
    assert!(p.victims.iter().all(|&i| v.containers[i as usize].app == ab));
}

#[test]
fn the_dead_zone_at_work() {
    // A (80) holds 79 and wants 10 more; B (20) holds 21: ideal 80 / 20, B 1 over — within
    // the dead zone of 10 % (21 ≤ 22), so left alone; with no dead zone, one container goes.
    let (mut c, a, b) = seed_cluster();
    let app_a = c.app(a, 0);
    let app_b = c.app(b, 0);
    for i in 0..100u32 {
        c.container(if i < 79 { app_a } else { app_b }, i / 10, gib(1), u64::from(i), false);
    }
    c.pending(app_a, gib(1), 10, &[]);
    let v = c.view();
    let dead_zone = PreemptionConfig { max_ignored_over_capacity: 0.1, ..greedy() };
    let p = plan(&v, &dead_zone, |_| false, |_| 0.0);
    assert!(p.victims.is_empty());
    assert_eq!(p.queues[b as usize].to_preempt, 0.0);
    let p = plan(&v, &greedy(), |_| false, |_| 0.0);
    assert_eq!(p.victims, vec![99]);
}

/// Two nodes of 10 GiB; A 80 %, B 20 % (16 / 4 GiB). B holds 14 GiB in 2 GiB containers of
/// three apps, plus one stopping; A wants 10 × 2 GiB.
#[test]
fn victim_order_newest_app_newest_container_masters_last() {
    let mut c = Cluster::new();
    c.node("n0", gib(10), &[]);
    c.node("n1", gib(10), &[]);
    let a = c.queue("root.a", 0, 0.8, 1.0);
    let b = c.queue("root.b", 0, 0.2, 1.0);
    let (b1, b2, b3) = (c.app(b, 0), c.app(b, 10), c.app(b, 20));
    let m1 = c.container(b1, 0, gib(2), 0, true);
    let c1 = c.container(b1, 0, gib(2), 1, false);
    let c5 = c.container(b1, 0, gib(2), 5, false);
    let m2 = c.container(b2, 0, gib(2), 10, true);
    let c11 = c.container(b2, 1, gib(2), 11, false);
    let c12 = c.container(b2, 1, gib(2), 12, false);
    let m3 = c.container(b3, 1, gib(2), 20, true);
    let stopping = c.container(b3, 1, gib(2), 21, false);
    c.container_state(stopping, GANTRY_CONTAINER_STOPPING);
    let app_a = c.app(a, 30);
    c.pending(app_a, gib(2), 10, &[]);
    let v = c.view();
    // B holds 14 (the stopping one does not count): A ideal 16, B 4 (λ = 1). B is 10 over;
    // greedy asks all 10. need = A's lack 16 − (20 − 14 held) = 10.
    let p = plan(&v, &greedy(), |_| false, |_| 0.0);
    close(in_gib(p.queues[b as usize].to_preempt), 10.0);
    close(in_gib(p.need), 10.0);
    // Non-masters: b3 has none left (its other one is stopping), b2's newest first, then
    // b1's; then masters, newest app first: m3. B keeps m1 and m2 = 4, its guarantee.
    assert_eq!(p.victims, vec![c12, c11, c5, c1, m3]);
    assert!(!p.victims.contains(&m1) && !p.victims.contains(&m2) && !p.victims.contains(&stopping));

    // Default settings pace it: B is 10 GiB over, bounded to 10 % of the 20 GiB cluster
    // (2 GiB), × 0.2 = 0.4 GiB this round — less than a container: nothing yet, 0.4 carried.
    let p = plan(&v, &cfg(), |_| false, |_| 0.0);
    assert!(p.victims.is_empty(), "{:?}", p.victims);
    close(in_gib(p.queues[b as usize].carry), 0.4);
    // With 1.6 GiB carried from earlier rounds, this round's 0.4 makes a container.
    let carried = |q: usize| if q == b as usize { 1.6 * (1u64 << 30) as f64 } else { 0.0 };
    let p = plan(&v, &cfg(), |_| false, carried);
    assert_eq!(p.victims, vec![c12]);
    // A container selected last round counts as given back and is kept in preference to a
    // newer one, so selections do not wander: 2 GiB marked + 0.4 is still one container.
    let c1_id = v.containers[c1 as usize].id;
    let p = plan(&v, &cfg(), |id| id == c1_id, |_| 0.0);
    assert_eq!(p.victims, vec![c1]);
    close(in_gib(p.queues[b as usize].carry), 0.4);
}

#[test]
fn stopping_containers_count_as_already_given_back() {
    // The seed's scenario after two rounds: 16 of B's containers are stopping. B holds 84,
    // ideal 20 → 64 over; bound 10 → ×0.2 → 2 again: the next two newest running ones.
    let (mut c, a, b) = seed_cluster();
    let app_b = c.app(b, 0);
    for i in 0..100u32 {
        let k = c.container(app_b, i / 10, gib(1), u64::from(i), false);
        if i >= 84 {
            c.container_state(k, GANTRY_CONTAINER_STOPPING);
        }
    }
    let app_a = c.app(a, 400_000);
    c.pending(app_a, gib(1), 100, &[]);
    let v = c.view();
    let p = plan(&v, &cfg(), |_| false, |_| 0.0);
    close(in_gib(p.queues[b as usize].held), 84.0);
    // need = lack 80 − (100 − 84) = 64.
    close(in_gib(p.need), 64.0);
    assert_eq!(p.victims, vec![83, 82]);
    // Greedy: exactly the 64 still needed, B keeps 20.
    let p = plan(&v, &greedy(), |_| false, |_| 0.0);
    assert_eq!(p.victims, (20..84).rev().collect::<Vec<u32>>());
}

/// Four plain nodes (`gpu = none`, 10 GiB) full of B's 40 containers of 1 GiB, and a GPU node
/// (`gpu = a100`, 10 GiB, 4 GPUs) where A holds one container of `on_gpu_node`; A (80 %) and B
/// (20 %). The cluster, A's and B's queues, and A's app.
fn plain_nodes_full_of_b_and_a_gpu_node_of_a(on_gpu_node: GantryResources) -> (Cluster, u32, u32, u32) {
    let mut c = Cluster::new();
    for i in 0..4 {
        c.node(&format!("n{i}"), gib(10), &[("gpu", "none")]);
    }
    c.node("g0", GantryResources { gpus: 4, ..gib(10) }, &[("gpu", "a100")]);
    let a = c.queue("root.a", 0, 0.8, 1.0);
    let b = c.queue("root.b", 0, 0.2, 1.0);
    let app_b = c.app(b, 0);
    for i in 0..40u32 {
        c.container(app_b, i / 10, gib(1), u64::from(i), false);
    }
    let app_a = c.app(a, 100);
    c.container(app_a, 4, on_gpu_node, 50, false);
    (c, a, b, app_a)
}

#[test]
fn no_preemption_for_requests_no_freed_node_could_run() {
    // B holds the plain nodes; A holds the GPU node and asks for more GPUs (only its own
    // containers could make room for them), and for containers larger than any node.
    // Neither counts, so B keeps everything.
    let gpu = GantryResources { gpus: 4, ..gib(10) };
    let (mut c, a, _, app_a) = plain_nodes_full_of_b_and_a_gpu_node_of_a(gpu);
    let want_gpu = GantryResources { gpus: 1, ..gib(1) };
    c.pending(app_a, want_gpu, 8, &[("gpu", "a100")]);
    c.pending(app_a, gib(20), 2, &[]);
    let v = c.view();
    let p = plan(&v, &greedy(), |_| false, |_| 0.0);
    assert!(p.victims.is_empty(), "{:?}", p.victims);
    assert_eq!(p.queues[a as usize].pending, 0.0);
    assert_eq!(p.need, 0.0);

    // The same request on a plain node that B's containers fill does count.
    let mut c2 = Cluster::new();
    for i in 0..4 {
        c2.node(&format!("n{i}"), gib(10), &[("gpu", "none")]);
    }
    let a = c2.queue("root.a", 0, 0.8, 1.0);
    let b = c2.queue("root.b", 0, 0.2, 1.0);
    let app_b = c2.app(b, 0);
    for i in 0..40u32 {
        c2.container(app_b, i / 10, gib(1), u64::from(i), false);
    }
    let app_a = c2.app(a, 100);
    c2.pending(app_a, gib(1), 8, &[("gpu", "none")]);
    let p = plan(&c2.view(), &greedy(), |_| false, |_| 0.0);
    assert_eq!(p.victims.len(), 8);
}

#[test]
fn victims_only_where_the_freed_room_helps() {
    // B holds nodes n0 (labelled ssd) and n1 (not); A only runs on ssd nodes. Only n0's
    // containers are taken, though n1's are newer.
    let mut c = Cluster::new();
    c.node("n0", gib(10), &[("disk", "ssd")]);
    c.node("n1", gib(10), &[("disk", "hdd")]);
    let a = c.queue("root.a", 0, 0.5, 1.0);
    let b = c.queue("root.b", 0, 0.5, 1.0);
    let app_b = c.app(b, 0);
    for i in 0..20u32 {
        c.container(app_b, i % 2, gib(1), u64::from(i), false); // even → n0, odd → n1
    }
    let app_a = c.app(a, 100);
    c.pending(app_a, gib(1), 4, &[("disk", "ssd")]);
    let v = c.view();
    // A: ideal min(10, 4) = 4; B 16 → 4 over, greedy asks 4: the 4 newest on n0.
    let p = plan(&v, &greedy(), |_| false, |_| 0.0);
    assert_eq!(p.victims, vec![18, 16, 14, 12]);
    // A node that stops being RUNNING is no help either.
    c.node_state(0, GANTRY_NODE_DRAINING);
    let p = plan(&c.view(), &greedy(), |_| false, |_| 0.0);
    assert!(p.victims.is_empty());
}

#[test]
fn dominant_shares_see_the_resource_that_is_short() {
    // Ten nodes of 10 cores and 10 GiB. B (50 %) holds 20 containers of 5 cores and 1 GiB:
    // all the CPU, a fifth of the memory. A (50 %) wants 10 of 1 core and 4 GiB: none fits.
    let mut c = Cluster::of_nodes(10, gib(10));
    let a = c.queue("root.a", 0, 0.5, 1.0);
    let b = c.queue("root.b", 0, 0.5, 1.0);
    let app_b = c.app(b, 0);
    let cpu_heavy = GantryResources::new(5000, 1 << 30, 0);
    for i in 0..20u32 {
        c.container(app_b, i / 2, cpu_heavy, u64::from(i), false);
    }
    let app_a = c.app(a, 100);
    c.pending(app_a, GantryResources::new(1000, 4 << 30, 0), 10, &[]);
    let v = c.view();
    // Memory: B holds 20 GiB, under its 50: nothing to do (YARN's default calculator too).
    let p = plan(&v, &greedy(), |_| false, |_| 0.0);
    assert!(p.victims.is_empty());
    // Dominant: B's share is 1.0 (CPU), A's demand 0.4 (memory). Ideal A 0.4, B 0.6; B is
    // 0.4 over. But A needs only 10 cores (memory is free): two of B's containers.
    let drf = PreemptionConfig { resource_calculator: Calculator::Dominant, ..greedy() };
    let p = plan(&v, &drf, |_| false, |_| 0.0);
    close(p.total, 1.0);
    close(p.queues[a as usize].ideal, 0.4);
    close(p.queues[b as usize].ideal, 0.6);
    assert_eq!(p.victims, vec![19, 18]);
}

#[test]
fn apps_that_are_ending_are_not_victims() {
    let (mut c, a, b) = seed_cluster();
    let b1 = c.app(b, 0);
    let b2 = c.app(b, 10);
    for i in 0..100u32 {
        c.container(if i < 50 { b1 } else { b2 }, i / 10, gib(1), u64::from(i), false);
    }
    c.app_state(b2, GANTRY_APP_KILLED);
    let app_a = c.app(a, 100);
    c.pending(app_a, gib(1), 10, &[]);
    let p = plan(&c.view(), &greedy(), |_| false, |_| 0.0);
    assert_eq!(p.victims, (40..50).rev().collect::<Vec<u32>>());
}

#[test]
fn free_room_no_pending_request_can_use_is_not_shared_out() {
    // Four plain nodes full of B's containers (40), a GPU node where A holds 1 GiB and all 4
    // GPUs (9 GiB free); A asks for 4 × 1 GiB on plain nodes. Base 50: A guaranteed 40, B 10.
    let (mut c, a, b, app_a) =
        plain_nodes_full_of_b_and_a_gpu_node_of_a(GantryResources { gpus: 4, ..gib(1) });
    c.pending(app_a, gib(1), 4, &[("gpu", "none")]);
    let p = plan(&c.view(), &greedy(), |_| false, |_| 0.0);
    // g0's 9 free GiB fit no pending request: the queues share 50 − 9 = 41. A gets its
    // demand, 5; B the other 36 — 4 over, so four of its containers go.
    close(in_gib(p.available), 41.0);
    close(in_gib(p.queues[a as usize].ideal), 5.0);
    close(in_gib(p.queues[b as usize].ideal), 36.0);
    assert_eq!(p.victims, vec![39, 38, 37, 36]);
}

#[test]
fn free_room_too_small_for_any_container_does_not_stop_the_last_victim() {
    // One node of 4 GiB + 1 MiB: B (50 %) fills it with four 1 GiB containers, A (50 %)
    // wants two. A lacks 2 GiB (its ideal is its demand); the free 1 MiB counts in the need
    // (2 GiB − 1 MiB), which one container does not meet and two exceed by 1 MiB. Two are
    // taken: A's two then fit, and A ends at its ideal, not above it. (Refusing the second
    // left A one container short for ever: the live test's case.)
    let mut c = Cluster::new();
    let node = gib(4).plus(&GantryResources::new(0, 1 << 20, 0));
    c.node("n0", node, &[]);
    let a = c.queue("root.a", 0, 0.5, 1.0);
    let b = c.queue("root.b", 0, 0.5, 1.0);
    let (app_a, app_b) = (c.app(a, 10), c.app(b, 0));
    for i in 0..4u32 {
        c.container(app_b, 0, gib(1), u64::from(i), false);
    }
    c.pending(app_a, gib(1), 2, &[]);
    let p = plan(&c.view(), &greedy(), |_| false, |_| 0.0);
    assert_eq!(p.victims, vec![3, 2], "B's two newest");
}

#[test]
fn no_container_beyond_what_is_lacked() {
    // A (40 %) holds 66 and wants more, B (20 %) holds 34 and wants more: ideal A 66.67,
    // B 33.33 (the spare 40 shared 2:1). B is 0.67 over, A lacks 0.67 — less than one
    // container: freeing one would put A over capacity itself (67 is above its ideal and
    // above 40 × 1.1), and the next round would take it back. A's need rounds down to
    // nothing; nothing is selected.
    let mut c = Cluster::of_nodes(10, gib(10));
    let a = c.queue("root.a", 0, 0.4, 1.0);
    let b = c.queue("root.b", 0, 0.2, 1.0);
    c.queue("root.c", 0, 0.4, 1.0);
    let (app_a, app_b) = (c.app(a, 0), c.app(b, 0));
    for i in 0..100u32 {
        c.container(if i < 66 { app_a } else { app_b }, i / 10, gib(1), u64::from(i), false);
    }
    c.pending(app_a, gib(1), 10, &[]);
    c.pending(app_b, gib(1), 10, &[]);
    let p = plan(&c.view(), &greedy(), |_| false, |_| 0.0);
    close(in_gib(p.queues[a as usize].ideal), 200.0 / 3.0);
    close(in_gib(p.need), 0.0);
    assert!(p.victims.is_empty());
}

#[test]
fn a_gang_goes_whole_or_not_at_all() {
    // Two nodes (20 GiB); B (20 %) runs 12 single containers (older app) and a gang of 8
    // (newer app); A (80 %) asks for 6, then for 8. Stopping one gang member restarts the
    // gang, so a gang counts as one unit of its total size.
    let build = |want: u32| {
        let mut c = Cluster::new();
        c.node("n0", gib(10), &[]);
        c.node("n1", gib(10), &[]);
        let a = c.queue("root.a", 0, 0.8, 1.0);
        let b = c.queue("root.b", 0, 0.2, 1.0);
        let singles = c.app(b, 0);
        for i in 0..12u32 {
            c.container(singles, i / 10, gib(1), u64::from(i), false); // 0..12
        }
        let gang = c.app(b, 10);
        c.gang(gang, &[1, 1, 1, 1, 1, 1, 1, 1], gib(1), 20); // 12..20
        let app_a = c.app(a, 30);
        c.pending(app_a, gib(1), want, &[]);
        c
    };
    // A wants 6: ideal A 6, B 14 → B 6 over, need 6. The gang (8) would free more than A
    // lacks: skipped; the six newest singles go.
    let p = plan(&build(6).view(), &greedy(), |_| false, |_| 0.0);
    assert_eq!(p.victims, vec![11, 10, 9, 8, 7, 6]);
    // A wants 8: the gang (newest app) is exactly what is lacking.
    let p = plan(&build(8).view(), &greedy(), |_| false, |_| 0.0);
    assert_eq!(p.victims, (12..20).collect::<Vec<u32>>());
}

#[test]
fn empty_views() {
    let mut c = Cluster::new();
    let p = plan(&c.view(), &cfg(), |_| false, |_| 0.0);
    assert!(p.victims.is_empty());
    assert_eq!(p.total, 0.0);
}
