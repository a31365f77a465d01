//! Retention of ended applications in the store, on real SQLite files: by count and by age,
//! live applications (and ended ones whose containers still run) kept, containers removed with
//! their application, ids never reused after a prune and a reopen, and the daemon's start-up
//! read bounded to what its memory keeps.

use gantry_engine::{AppId, AppSpec, ContainerId, RequestSpec, Resources};
use gantry_scheduler::store::{AppRecord, ContainerRecord, Retention, Store, Write};
use gantry_sdk::abi::{
    GANTRY_APP_ACCEPTED, GANTRY_APP_FAILED, GANTRY_APP_FINISHED, GANTRY_APP_KILLED, GANTRY_APP_NEW,
    GANTRY_APP_REJECTED, GANTRY_APP_RUNNING, GANTRY_CONTAINER_COMPLETED, GANTRY_CONTAINER_RUNNING,
};
use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const T0: u64 = 1_700_000_000_000;
const HOUR: u64 = 3_600_000;

fn app(id: u64, state: u32, state_ms: u64) -> AppRecord {
    AppRecord {
        id: AppId(id),
        spec: AppSpec {
            name: format!("app-{id}"),
            queue: "root.default".into(),
            user: "alice".into(),
            priority: 0,
            max_attempts: 1,
            requests: vec![RequestSpec {
                resources: Resources::new(100, 1 << 20, 0),
                count: 1,
                ..RequestSpec::default()
            }],
        },
        launch: serde_json::json!({ "command": ["true"] }),
        submit_ms: T0,
        state,
        state_ms,
        diagnostics: String::new(),
    }
}

fn container(id: u64, app: u64, state: u32) -> ContainerRecord {
    ContainerRecord {
        id: ContainerId(id),
        app: AppId(app),
        request: 0,
        node: "n1".into(),
        resources: Resources::new(100, 1 << 20, 0),
        gpus: Vec::new(),
        state,
        started_ms: Some(T0),
        exit_code: None,
        reason: None,
        finished_ms: None,
        cluster: gantry_proto::ClusterId::LEGACY,
    }
}

/// App `id` in `state` since `state_ms`, with container `id` (ended unless the app is live).
fn app_with_container(id: u64, state: u32, state_ms: u64) -> Vec<Write> {
    let live = matches!(state, GANTRY_APP_NEW | GANTRY_APP_ACCEPTED | GANTRY_APP_RUNNING);
    let c = if live { GANTRY_CONTAINER_RUNNING } else { GANTRY_CONTAINER_COMPLETED };
    vec![Write::InsertApp(app(id, state, state_ms)), Write::UpsertContainer(container(id, id, c))]
}

fn count(keep: u64) -> Retention {
    Retention { max_completed_apps: keep, max_age: None, chunk_apps: 3 }
}

fn prune(store: &Store, retention: &Retention, now_ms: u64) -> u64 {
    store.prune_ended(retention, now_ms, &AtomicBool::new(false)).expect("prune").pruned_apps
}

fn stored_apps(store: &Store) -> BTreeSet<u64> {
    store.load().expect("load").apps.iter().map(|a| a.id.0).collect()
}

fn stored_containers(store: &Store) -> BTreeSet<u64> {
    store.load().expect("load").containers.iter().map(|c| c.id.0).collect()
}

#[test]
fn count_retention_keeps_the_most_recently_ended_not_the_highest_ids() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let ended = [GANTRY_APP_FINISHED, GANTRY_APP_FAILED, GANTRY_APP_KILLED, GANTRY_APP_REJECTED];
    let mut writes = Vec::new();
    // Ids 1..=10 ended in the reverse order of their ids: 1 last, 10 first.
    for id in 1..=10 {
        writes.extend(app_with_container(id, ended[id as usize % 4], T0 + (11 - id) * 1000));
    }
    writes.extend(app_with_container(11, GANTRY_APP_RUNNING, T0));
    writes.extend(app_with_container(12, GANTRY_APP_NEW, T0));
    store.write_blocking(writes).unwrap();

    assert_eq!(prune(&store, &count(4), T0 + HOUR), 6);
    assert_eq!(stored_apps(&store), BTreeSet::from([1, 2, 3, 4, 11, 12]), "the four that ended last");
    assert_eq!(
        stored_containers(&store),
        BTreeSet::from([1, 2, 3, 4, 11, 12]),
        "containers go with their app"
    );
    assert_eq!(prune(&store, &count(4), T0 + HOUR), 0, "a second round has nothing to do");
    store.check_integrity().unwrap();

    assert_eq!(prune(&store, &count(0), T0 + HOUR), 4, "a retention of 0 keeps no ended app");
    assert_eq!(stored_apps(&store), BTreeSet::from([11, 12]));
}

#[test]
fn age_retention_removes_what_ended_before_the_cutoff_and_the_stricter_bound_wins() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let now = T0 + 100 * HOUR;
    let day = Duration::from_secs(24 * 3600);
    let mut writes = Vec::new();
    // Ended 3 days, 25 h, exactly 24 h, 23 h and 1 h ago; one live since 5 days.
    for (id, ago) in [(1, 72 * HOUR), (2, 25 * HOUR), (3, 24 * HOUR), (4, 23 * HOUR), (5, HOUR)] {
        writes.extend(app_with_container(id, GANTRY_APP_FINISHED, now - ago));
    }
    writes.extend(app_with_container(6, GANTRY_APP_RUNNING, now - 120 * HOUR));
    store.write_blocking(writes).unwrap();

    let by_age = Retention { max_completed_apps: 1_000, max_age: Some(day), chunk_apps: 500 };
    assert_eq!(prune(&store, &by_age, now), 2);
    assert_eq!(stored_apps(&store), BTreeSet::from([3, 4, 5, 6]), "ended exactly 24 h ago is kept");

    // By count alone 2 would stay; the age bound removes more, and wins.
    let both =
        Retention { max_completed_apps: 2, max_age: Some(Duration::from_secs(2 * 3600)), chunk_apps: 1 };
    assert_eq!(prune(&store, &both, now), 2);
    assert_eq!(stored_apps(&store), BTreeSet::from([5, 6]));
    // The count bound is stricter now.
    let both = Retention { max_completed_apps: 0, max_age: Some(day), chunk_apps: 1 };
    assert_eq!(prune(&store, &both, now), 1);
    assert_eq!(stored_apps(&store), BTreeSet::from([6]), "a live app is never pruned, however old");
}

#[test]
fn live_apps_and_ended_apps_with_a_live_container_are_never_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let mut writes = Vec::new();
    writes.extend(app_with_container(1, GANTRY_APP_NEW, T0));
    writes.extend(app_with_container(2, GANTRY_APP_ACCEPTED, T0));
    writes.extend(app_with_container(3, GANTRY_APP_RUNNING, T0));
    // Killed, but its container's exit has not been reported yet: the exit must still find it.
    writes.push(Write::InsertApp(app(4, GANTRY_APP_KILLED, T0)));
    writes.push(Write::UpsertContainer(container(4, 4, GANTRY_CONTAINER_RUNNING)));
    writes.push(Write::UpsertContainer(container(5, 4, GANTRY_CONTAINER_COMPLETED)));
    writes.extend(app_with_container(6, GANTRY_APP_FINISHED, T0));
    store.write_blocking(writes).unwrap();

    assert_eq!(prune(&store, &count(0), T0 + HOUR), 1);
    assert_eq!(stored_apps(&store), BTreeSet::from([1, 2, 3, 4]));
    // Even asked by id, the writer leaves live apps and live containers alone.
    store.write_blocking(vec![Write::PruneApps { ids: (1..=4).map(AppId).collect() }]).unwrap();
    assert_eq!(stored_apps(&store), BTreeSet::from([1, 2, 3, 4]));

    store
        .write_blocking(vec![Write::ContainerState {
            id: ContainerId(4),
            state: GANTRY_CONTAINER_COMPLETED,
            started_ms: None,
            exit_code: Some(137),
            reason: Some("killed-by-request".into()),
            finished_ms: Some(T0),
        }])
        .unwrap();
    assert_eq!(prune(&store, &count(0), T0 + HOUR), 1, "once its container ended");
    assert_eq!(stored_apps(&store), BTreeSet::from([1, 2, 3]));
    assert_eq!(stored_containers(&store), BTreeSet::from([1, 2, 3]));
    store.check_integrity().unwrap();
}

#[test]
fn pruned_ids_are_never_handed_out_again_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    let writes: Vec<Write> =
        (1..=50).flat_map(|id| app_with_container(id, GANTRY_APP_FINISHED, T0 + id)).collect();
    store.write_blocking(writes).unwrap();
    assert_eq!(prune(&store, &count(0), T0 + HOUR), 50);
    store.close().unwrap();

    let store = Store::open(&path).unwrap();
    for r in [store.load().unwrap(), store.load_recent(10).unwrap()] {
        assert!(r.apps.is_empty() && r.containers.is_empty(), "everything was pruned");
        assert_eq!((r.next_app_id, r.next_container_id), (51, 51), "ids continue past the pruned ones");
    }
    // The next app takes the next id; the old ones stay unknown.
    store.write_blocking(app_with_container(51, GANTRY_APP_NEW, T0 + HOUR)).unwrap();
    store.close().unwrap();
    let store = Store::open(&path).unwrap();
    let r = store.load().unwrap();
    assert_eq!((r.next_app_id, r.next_container_id), (52, 52));
    assert!(store.app_record(AppId(7)).unwrap().is_none());
}

#[test]
fn a_start_up_load_reads_live_apps_and_only_the_newest_ended_with_their_containers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    let mut writes = Vec::new();
    // 100 ended apps whose end times run against their ids in blocks, and 5 live ones.
    for id in 1..=100 {
        writes.extend(app_with_container(id, GANTRY_APP_FINISHED, T0 + (id % 10) * 100 + id / 10));
    }
    for id in 101..=105 {
        writes.extend(app_with_container(id, GANTRY_APP_RUNNING, T0));
    }
    // An ended app with a second container.
    writes.push(Write::UpsertContainer(container(1_000, 99, GANTRY_CONTAINER_COMPLETED)));
    store.write_blocking(writes).unwrap();
    store.close().unwrap();

    let store = Store::open(&path).unwrap();
    let all = store.load().unwrap();
    assert_eq!(all.apps.len(), 105);
    let r = store.load_recent(10).unwrap();
    let mut newest: Vec<&AppRecord> = all.apps.iter().filter(|a| a.state == GANTRY_APP_FINISHED).collect();
    newest.sort_by_key(|a| std::cmp::Reverse((a.state_ms, a.id.0)));
    let mut want: Vec<u64> = newest[..10].iter().map(|a| a.id.0).chain(101..=105).collect();
    want.sort_unstable();
    let got: Vec<u64> = r.apps.iter().map(|a| a.id.0).collect();
    assert_eq!(got, want, "in id order: the live ones and the 10 that ended last");
    assert!(got.contains(&99), "app 99 ended last");
    let mut want_containers: Vec<u64> = want.clone();
    want_containers.push(1_000);
    want_containers.sort_unstable();
    assert_eq!(r.containers.iter().map(|c| c.id.0).collect::<Vec<_>>(), want_containers);
    // The records themselves are those a full load reads.
    for a in &r.apps {
        assert_eq!(Some(a), all.apps.iter().find(|b| b.id == a.id));
    }
    assert_eq!((r.next_app_id, r.next_container_id), (all.next_app_id, all.next_container_id));
    let live_only = store.load_recent(0).unwrap();
    assert_eq!(live_only.apps.iter().map(|a| a.id.0).collect::<Vec<_>>(), (101..=105).collect::<Vec<_>>());
    assert_eq!(live_only.containers.len(), 5);
}

#[test]
fn a_backlog_is_pruned_in_chunks_while_submissions_keep_committing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let writes: Vec<Write> =
        (1..=3_000).flat_map(|id| app_with_container(id, GANTRY_APP_FINISHED, T0 + id)).collect();
    store.write_blocking(writes).unwrap();
    let retention = Retention { max_completed_apps: 500, max_age: None, chunk_apps: 100 };
    let report = std::thread::scope(|s| {
        let submitter = s.spawn(|| {
            for id in 3_001..=3_200 {
                store.write_blocking(app_with_container(id, GANTRY_APP_NEW, T0 + id)).unwrap();
            }
        });
        let report = store.prune_ended(&retention, T0 + HOUR, &AtomicBool::new(false)).unwrap();
        submitter.join().unwrap();
        report
    });
    assert_eq!((report.pruned_apps, report.chunks), (2_500, 25));
    assert!(!report.interrupted);
    let apps = stored_apps(&store);
    assert_eq!(apps.len(), 700, "500 ended kept and 200 submitted");
    assert_eq!(apps.first(), Some(&2_501));
    store.check_integrity().unwrap();
}

#[test]
fn a_round_asked_to_stop_stops_between_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let writes: Vec<Write> =
        (1..=10).flat_map(|id| app_with_container(id, GANTRY_APP_FINISHED, T0 + id)).collect();
    store.write_blocking(writes).unwrap();
    let report = store.prune_ended(&count(0), T0 + HOUR, &AtomicBool::new(true)).unwrap();
    assert!(report.interrupted);
    assert_eq!(report.pruned_apps, 0);
    assert_eq!(stored_apps(&store).len(), 10, "left for the next round");
}

#[test]
fn a_count_no_store_can_reach_bounds_nothing_but_the_age_still_applies() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let now = T0 + 10 * HOUR;
    let writes: Vec<Write> =
        (1..=6).flat_map(|id| app_with_container(id, GANTRY_APP_FINISHED, now - id * HOUR)).collect();
    store.write_blocking(writes).unwrap();
    for keep in [i64::MAX as u64, u64::MAX] {
        assert_eq!(prune(&store, &count(keep), now), 0, "keep {keep}");
    }
    let by_age = Retention {
        max_completed_apps: u64::MAX,
        max_age: Some(Duration::from_secs(3 * 3600)),
        chunk_apps: 2,
    };
    assert_eq!(prune(&store, &by_age, now), 3, "ended 4, 5 and 6 hours ago");
    assert_eq!(stored_apps(&store), BTreeSet::from([1, 2, 3]));
}
