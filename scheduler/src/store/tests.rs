//! Tests of the store through its handle: every record round trip, ids, refused jobs and
//! failed batches, the queue configuration and drains, corrupt rows, closing.

use super::*;
use gantry_engine::{AppSpec, ContainerId, QueueSpec, RackAffinity, RequestSpec, ReservationId};
use gantry_sdk::abi::{
    GANTRY_APP_ACCEPTED, GANTRY_APP_FINISHED, GANTRY_APP_NEW, GANTRY_CONTAINER_ALLOCATED,
    GANTRY_CONTAINER_COMPLETED, GANTRY_CONTAINER_RUNNING, GANTRY_RESERVATION_ACCEPTED,
    GANTRY_RESERVATION_NEW,
};
use rusqlite::params;

fn app(id: u64) -> AppRecord {
    AppRecord {
        id: AppId(id),
        spec: AppSpec {
            name: format!("app-{id}"),
            queue: "root.prod.etl".into(),
            user: "alice".into(),
            priority: -3,
            max_attempts: 5,
            requests: vec![
                RequestSpec {
                    resources: resources(1500, 2 << 30, 2),
                    count: 3,
                    gang: true,
                    priority: 7,
                    selector: vec![("zone".into(), "a".into()), ("ssd".into(), String::new())],
                    preferred: vec![("gpu".into(), "a100".into())],
                    rack_affinity: RackAffinity::Required,
                    master: true,
                    expected_ms: 60_000,
                    slow_ms: 90_000,
                    deadline_ms: 1_700_000_000_000,
                },
                RequestSpec {
                    resources: resources(250, 1 << 20, 0),
                    count: 1,
                    rack_affinity: RackAffinity::Preferred,
                    ..RequestSpec::default()
                },
            ],
        },
        launch: serde_json::json!({ "command": ["echo", "héllo"], "env": { "A": "1" } }),
        submit_ms: 1_000 + id,
        state: GANTRY_APP_NEW,
        state_ms: 1_000 + id,
        diagnostics: String::new(),
    }
}

fn container(id: u64, app: u64) -> ContainerRecord {
    ContainerRecord {
        id: ContainerId(id),
        app: AppId(app),
        request: 0,
        node: "node-1".into(),
        resources: resources(1500, 2 << 30, 2),
        gpus: vec![0, 3],
        state: GANTRY_CONTAINER_ALLOCATED,
        started_ms: None,
        exit_code: None,
        reason: None,
        finished_ms: None,
        cluster: gantry_proto::ClusterId::from_bits(0xfeed_0000_0000_0000_0000_0000_0000_beef),
    }
}

fn reservation(id: u64) -> ReservationRecord {
    ReservationRecord {
        id: ReservationId(id),
        queue: "root.prod".into(),
        start_ms: 10,
        end_ms: 20,
        resources: resources(8000, 16 << 30, 4),
        state: GANTRY_RESERVATION_NEW,
    }
}

fn queues() -> Vec<QueueSpec> {
    vec![
        QueueSpec { path: "root.prod".into(), guaranteed: 0.7, maximum: 1.0 },
        QueueSpec { path: "root.dev".into(), guaranteed: 0.3, maximum: 0.1 + 0.2 },
    ]
}

#[test]
fn every_record_type_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(&path).unwrap();
    store
        .write_blocking(vec![
            Write::InsertApp(app(1)),
            Write::InsertApp(app(2)),
            Write::UpsertContainer(container(10, 1)),
            Write::UpsertContainer(container(11, 2)),
            Write::InsertReservation(reservation(5)),
            Write::QueueConfig { at_ms: 1, queues: queues() },
        ])
        .unwrap();
    store
        .write_blocking(vec![
            Write::AppState {
                id: AppId(1),
                state: GANTRY_APP_FINISHED,
                diagnostics: "done".into(),
                at_ms: 99,
            },
            Write::ContainerState {
                id: ContainerId(10),
                state: GANTRY_CONTAINER_RUNNING,
                started_ms: Some(50),
                exit_code: None,
                reason: None,
                finished_ms: None,
            },
            Write::ReservationState { id: ReservationId(5), state: GANTRY_RESERVATION_ACCEPTED },
        ])
        .unwrap();
    // A later state change with only some fields keeps the others.
    store
        .write_blocking(vec![Write::ContainerState {
            id: ContainerId(10),
            state: GANTRY_CONTAINER_COMPLETED,
            started_ms: None,
            exit_code: Some(-9),
            reason: Some("exited".into()),
            finished_ms: Some(60),
        }])
        .unwrap();
    drop(store);

    let store = Store::open(&path).unwrap();
    let r = store.load().unwrap();
    let mut a1 = app(1);
    a1.state = GANTRY_APP_FINISHED;
    a1.diagnostics = "done".into();
    a1.state_ms = 99;
    assert_eq!(r.apps, vec![a1, app(2)]);
    let mut c10 = container(10, 1);
    c10.state = GANTRY_CONTAINER_COMPLETED;
    c10.started_ms = Some(50);
    c10.exit_code = Some(-9);
    c10.reason = Some("exited".into());
    c10.finished_ms = Some(60);
    assert_eq!(r.containers, vec![c10, container(11, 2)]);
    let mut r5 = reservation(5);
    r5.state = GANTRY_RESERVATION_ACCEPTED;
    assert_eq!(r.reservations, vec![r5]);
    assert_eq!(r.queues, Some(queues()));
    assert_eq!((r.next_app_id, r.next_container_id, r.next_reservation_id), (3, 12, 6));
    store.check_integrity().unwrap();
}

#[test]
fn plan_reservations_round_trip_and_records_of_the_previous_version_restore_with_atoms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(&path).unwrap();
    let request = gantry_engine::ReservationRequest {
        queue: "root.prod".into(),
        name: "nightly".into(),
        user: "alice".into(),
        priority: 2,
        arrival_ms: None,
        deadline_ms: Some(100_000),
        definition: gantry_rdl::parse_text(
            "order(atom(1c/2GiB, 1, 4, 10s, 40s), atom(2c/1GiB, 1, 1, 5s, 5s))",
        )
        .unwrap(),
    };
    let piece =
        |atom, start_ms, end_ms, bundles| gantry_engine::AtomInterval { atom, start_ms, end_ms, bundles };
    let record = PlanReservationRecord {
        id: ReservationId(3),
        request: request.clone(),
        submit_ms: 1_000,
        allocation: vec![piece(0, 10_000, 20_000, 4), piece(1, 20_000, 25_000, 1)],
    };
    store.write_blocking(vec![Write::PutPlanReservation(record.clone())]).unwrap();
    drop(store);
    // A record the previous version wrote: pieces of resources, no atoms.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let old = r#"{"queue":"root.prod","name":"old","user":"bob","priority":0,"arrival_ms":null,
        "deadline_ms":100000,"rdl":"order(atom(1c/2GiB, 1, 4, 10s, 40s), atom(2c/1GiB, 1, 1, 5s, 5s))",
        "submit_ms":0,"pieces":[[80000,90000,4000,8589934592,0],[90000,95000,2000,1073741824,0]]}"#;
    conn.execute("INSERT INTO plan_reservations (id, record) VALUES (7, ?1)", params![old]).unwrap();
    drop(conn);
    let store = Store::open(&path).unwrap();
    let r = store.load().unwrap();
    assert_eq!(r.plan_reservations.len(), 2);
    assert_eq!(r.plan_reservations[0], record);
    let legacy = &r.plan_reservations[1];
    assert_eq!((legacy.id, legacy.request.name.as_str()), (ReservationId(7), "old"));
    // Each old piece went to the atom whose bundle divides it.
    assert_eq!(legacy.allocation, vec![piece(0, 80_000, 90_000, 4), piece(1, 90_000, 95_000, 1)]);
}

#[test]
fn an_empty_store_starts_ids_at_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let r = store.load().unwrap();
    assert_eq!(
        r,
        Recovered { next_app_id: 1, next_container_id: 1, next_reservation_id: 1, ..Default::default() }
    );
}

#[test]
fn counters_only_go_up_and_survive_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    store
        .write_blocking(vec![
            Write::InsertApp(app(7)),
            Write::UpsertContainer(container(40, 7)),
            Write::NextIds(NextIds { app: 100, container: 3, reservation: 9 }),
        ])
        .unwrap();
    store.write_blocking(vec![Write::NextIds(NextIds { app: 50, container: 2, reservation: 2 })]).unwrap();
    store.write_blocking(vec![Write::DeleteApp { id: AppId(7) }]).unwrap();
    let r = store.load().unwrap();
    assert!(r.apps.is_empty());
    assert!(r.containers.is_empty(), "containers go with their app");
    assert_eq!((r.next_app_id, r.next_container_id, r.next_reservation_id), (100, 41, 9));
}

#[test]
fn a_refused_job_fails_alone_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    store.write_blocking(vec![Write::InsertApp(app(1))]).unwrap();
    // Queued back to back, so they usually share a batch; the outcome must not depend on it.
    let good = store.submit(vec![Write::InsertApp(app(2))]).unwrap();
    let dup = store.submit(vec![Write::InsertApp(app(3)), Write::InsertApp(app(1))]).unwrap();
    let orphan = store.submit(vec![Write::UpsertContainer(container(5, 42))]).unwrap();
    let unknown = store
        .submit(vec![Write::AppState {
            id: AppId(77),
            state: GANTRY_APP_ACCEPTED,
            diagnostics: String::new(),
            at_ms: 0,
        }])
        .unwrap();
    let mut too_big = app(4);
    too_big.submit_ms = u64::MAX;
    let too_big = store.submit(vec![Write::InsertApp(too_big)]).unwrap();
    let good2 = store.submit(vec![Write::InsertApp(app(5))]).unwrap();
    good.wait().unwrap();
    good2.wait().unwrap();
    for ack in [dup, orphan, unknown, too_big] {
        assert!(matches!(ack.wait(), Err(StoreError::Refused(_))));
    }
    let r = store.load().unwrap();
    let ids: Vec<u64> = r.apps.iter().map(|a| a.id.0).collect();
    assert_eq!(ids, vec![1, 2, 5], "app 3 went with its job's duplicate");
    assert!(r.containers.is_empty());
    assert_eq!(r.next_app_id, 6);
    assert_eq!(store.stats().failed_jobs, 4);
}

#[test]
fn a_batch_that_cannot_begin_fails_its_writers_and_the_next_one_works() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let options = StoreOptions { busy_timeout: Duration::ZERO, ..StoreOptions::default() };
    let store = Store::open_with(&path, options).unwrap();
    let blocker = Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = store.write_blocking(vec![Write::InsertApp(app(1))]).unwrap_err();
    assert!(matches!(err, StoreError::Database(ref m) if m.contains("locked")), "{err}");
    assert_eq!(store.stats().failed_transactions, 1);
    blocker.execute_batch("ROLLBACK").unwrap();
    store.write_blocking(vec![Write::InsertApp(app(2))]).unwrap();
    let ids: Vec<u64> = store.load().unwrap().apps.iter().map(|a| a.id.0).collect();
    assert_eq!(ids, vec![2]);
}

#[test]
fn the_same_queue_configuration_is_recorded_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let mut other = queues();
    other[0].maximum = 0.9;
    for (at, q) in [(1, queues()), (2, queues()), (3, other.clone()), (4, other.clone())] {
        store.write_blocking(vec![Write::QueueConfig { at_ms: at, queues: q }]).unwrap();
    }
    let conn = store.reader().unwrap();
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM queue_configs", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 2);
    assert_eq!(store.load().unwrap().queues, Some(other));
}

#[test]
fn drains_are_stored_until_undrained_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    let drain = |node: &str, drained| Write::NodeDrain { node: node.into(), drained, at_ms: 5 };
    store.write_blocking(vec![drain("n2", true), drain("n1", true), drain("n1", true)]).unwrap();
    assert_eq!(store.load().unwrap().drained_nodes, ["n1", "n2"], "a repeated drain is one drain");
    // Undraining a node that is not drained is fine.
    store.write_blocking(vec![drain("n2", false), drain("n3", false)]).unwrap();
    store.close().unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.load().unwrap().drained_nodes, ["n1"]);
}

#[test]
fn a_corrupt_row_is_reported_not_guessed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    store.write_blocking(vec![Write::InsertApp(app(1))]).unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.execute("UPDATE apps SET spec = '{\"requests\": 3}' WHERE id = 1", []).unwrap();
    assert!(matches!(store.load(), Err(StoreError::Corrupt { what: "app", id: 1, .. })));
}

#[test]
fn closing_finishes_queued_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    let acks: Vec<Ack> = (1..=50).map(|i| store.submit(vec![Write::InsertApp(app(i))]).unwrap()).collect();
    store.close().unwrap();
    for a in acks {
        a.wait().unwrap();
    }
    assert_eq!(Store::open(&path).unwrap().load().unwrap().apps.len(), 50);
}
