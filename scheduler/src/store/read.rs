//! Reading the store back: the row readers of apps and containers, which name the record a bad
//! row belongs to instead of guessing; [`read_all`], the snapshot a restart starts from; and
//! [`app_record`], one application found by id.

use super::json::{QueueJson, SpecJson, plan_from_json};
use super::writer::classify;
use super::{AppRecord, ContainerRecord, Recovered, ReservationRecord, StoreError, resources, retention};
use gantry_engine::{AppId, AppSpec, ContainerId, QueueSpec, RequestSpec, ReservationId};
use rusqlite::{Connection, OptionalExtension};

/// The columns [`app_row`] reads, in its order.
const APP_COLUMNS: &str =
    "id, name, queue, user, priority, max_attempts, submit_ms, state, state_ms, diagnostics, spec, launch";

fn app_row(row: &rusqlite::Row<'_>) -> Result<AppRecord, StoreError> {
    let raw: i64 = row.get(0).map_err(classify)?;
    let w = "app";
    let spec_json: String = col(row, 10, w, raw)?;
    let spec: SpecJson = serde_json::from_str(&spec_json).map_err(|e| corrupt(w, raw)(e.to_string()))?;
    let launch_json: String = col(row, 11, w, raw)?;
    let launch = serde_json::from_str(&launch_json).map_err(|e| corrupt(w, raw)(e.to_string()))?;
    Ok(AppRecord {
        id: AppId(col(row, 0, w, raw)?),
        spec: AppSpec {
            name: col(row, 1, w, raw)?,
            queue: col(row, 2, w, raw)?,
            user: col(row, 3, w, raw)?,
            priority: col(row, 4, w, raw)?,
            max_attempts: col(row, 5, w, raw)?,
            requests: spec.requests.into_iter().map(RequestSpec::from).collect(),
        },
        launch,
        submit_ms: col(row, 6, w, raw)?,
        state: col(row, 7, w, raw)?,
        state_ms: col(row, 8, w, raw)?,
        diagnostics: col(row, 9, w, raw)?,
    })
}

/// The columns [`container_row`] reads, in its order.
const CONTAINER_COLUMNS: &str = "id, app, request, node, cpu_millis, memory_bytes, gpus, gpu_indexes, state,
     started_ms, exit_code, reason, finished_ms, cluster";

fn container_row(row: &rusqlite::Row<'_>) -> Result<ContainerRecord, StoreError> {
    let raw: i64 = row.get(0).map_err(classify)?;
    let w = "container";
    let gpus_json: String = col(row, 7, w, raw)?;
    let cluster: String = col(row, 13, w, raw)?;
    Ok(ContainerRecord {
        id: ContainerId(col(row, 0, w, raw)?),
        app: AppId(col(row, 1, w, raw)?),
        request: col(row, 2, w, raw)?,
        node: col(row, 3, w, raw)?,
        resources: resources(col(row, 4, w, raw)?, col(row, 5, w, raw)?, col(row, 6, w, raw)?),
        gpus: serde_json::from_str(&gpus_json).map_err(|e| corrupt(w, raw)(e.to_string()))?,
        state: col(row, 8, w, raw)?,
        started_ms: col(row, 9, w, raw)?,
        exit_code: col(row, 10, w, raw)?,
        reason: col(row, 11, w, raw)?,
        finished_ms: col(row, 12, w, raw)?,
        cluster: gantry_proto::ClusterId::parse(&cluster).map_err(|e| corrupt(w, raw)(e.to_string()))?,
    })
}

fn corrupt(what: &'static str, id: i64) -> impl Fn(String) -> StoreError {
    move |reason| StoreError::Corrupt { what, id, reason }
}

/// A column read that names the record on failure, so a bad row is reported, not guessed at.
fn col<T: rusqlite::types::FromSql>(
    row: &rusqlite::Row<'_>,
    i: usize,
    what: &'static str,
    id: i64,
) -> Result<T, StoreError> {
    row.get(i).map_err(|e| corrupt(what, id)(format!("column {i}: {e}")))
}

/// Runs `sql` with `args` and turns each row into a record with `from_row`.
fn query_records<T>(
    conn: &Connection,
    sql: &str,
    args: impl rusqlite::Params,
    from_row: fn(&rusqlite::Row<'_>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(classify)?;
    let mut rows = stmt.query(args).map_err(classify)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(classify)? {
        out.push(from_row(row)?);
    }
    Ok(out)
}

/// The live applications' ids.
const LIVE_APP_IDS: &str = "SELECT id FROM apps WHERE state IN (1, 2, 3)";

/// The queries of the applications whose ids `ids` selects, and of their containers.
fn records_of(ids: &str) -> [String; 2] {
    [
        format!("SELECT {APP_COLUMNS} FROM apps WHERE id IN ({ids})"),
        format!("SELECT {CONTAINER_COLUMNS} FROM containers WHERE app IN ({ids})"),
    ]
}

/// One application as stored, with its containers, or `None` if it is not stored
/// ([`Store::app_record`](super::Store::app_record)).
pub(super) fn app_record(
    conn: &Connection,
    id: AppId,
) -> Result<Option<(AppRecord, Vec<ContainerRecord>)>, StoreError> {
    // Ids above i64::MAX are never stored.
    let Ok(raw) = i64::try_from(id.0) else { return Ok(None) };
    let mut stmt =
        conn.prepare(&format!("SELECT {APP_COLUMNS} FROM apps WHERE id = ?1")).map_err(classify)?;
    let mut rows = stmt.query([raw]).map_err(classify)?;
    let Some(row) = rows.next().map_err(classify)? else { return Ok(None) };
    let app = app_row(row)?;
    let mut stmt = conn
        .prepare(&format!("SELECT {CONTAINER_COLUMNS} FROM containers WHERE app = ?1 ORDER BY id"))
        .map_err(classify)?;
    let mut rows = stmt.query([raw]).map_err(classify)?;
    let mut containers = Vec::new();
    while let Some(row) = rows.next().map_err(classify)? {
        containers.push(container_row(row)?);
    }
    Ok(Some((app, containers)))
}

/// Reads the stored state; `ended_apps` bounds the ended applications read (see
/// [`Store::load_recent`](super::Store::load_recent)), `None` reads every one.
pub(super) fn read_all(conn: &Connection, ended_apps: Option<usize>) -> Result<Recovered, StoreError> {
    let mut out = Recovered::default();

    match ended_apps {
        None => {
            out.apps =
                query_records(conn, &format!("SELECT {APP_COLUMNS} FROM apps ORDER BY id"), [], app_row)?;
            out.containers = query_records(
                conn,
                &format!("SELECT {CONTAINER_COLUMNS} FROM containers ORDER BY id"),
                [],
                container_row,
            )?;
        }
        Some(n) => {
            // Live apps by the state index, the newest ended by the retention index, and the
            // containers of exactly those by the containers' app index: nothing here scans a
            // table. Both reads of a set run in the same snapshot, so they agree.
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            for (ids, args) in [(LIVE_APP_IDS, None), (retention::NEWEST_ENDED_IDS, Some(n))] {
                let params = rusqlite::params_from_iter(args);
                let [apps, containers] = records_of(ids);
                out.apps.extend(query_records(conn, &apps, params.clone(), app_row)?);
                out.containers.extend(query_records(conn, &containers, params, container_row)?);
            }
            out.apps.sort_by_key(|a| a.id.0);
            out.containers.sort_by_key(|c| c.id.0);
        }
    }

    let mut stmt = conn
        .prepare(
            "SELECT id, queue, start_ms, end_ms, cpu_millis, memory_bytes, gpus, state
             FROM reservations ORDER BY id",
        )
        .map_err(classify)?;
    let mut rows = stmt.query([]).map_err(classify)?;
    while let Some(row) = rows.next().map_err(classify)? {
        let raw: i64 = row.get(0).map_err(classify)?;
        let w = "reservation";
        out.reservations.push(ReservationRecord {
            id: ReservationId(col(row, 0, w, raw)?),
            queue: col(row, 1, w, raw)?,
            start_ms: col(row, 2, w, raw)?,
            end_ms: col(row, 3, w, raw)?,
            resources: resources(col(row, 4, w, raw)?, col(row, 5, w, raw)?, col(row, 6, w, raw)?),
            state: col(row, 7, w, raw)?,
        });
    }

    let counter = |name: &str| -> Result<u64, StoreError> {
        conn.query_row("SELECT value FROM counters WHERE name = ?1", [name], |r| r.get::<_, u64>(0))
            .optional()
            .map_err(classify)
            .map(|v| v.unwrap_or(1))
    };
    let max_id = |table: &str| -> Result<u64, StoreError> {
        conn.query_row(&format!("SELECT COALESCE(MAX(id), 0) FROM {table}"), [], |r| r.get::<_, u64>(0))
            .map_err(classify)
    };
    out.next_app_id = counter("app")?.max(max_id("apps")?.saturating_add(1)).max(1);
    out.next_container_id = counter("container")?.max(max_id("containers")?.saturating_add(1)).max(1);
    out.next_reservation_id = counter("reservation")?.max(max_id("reservations")?.saturating_add(1)).max(1);

    let queues: Option<(i64, String)> = conn
        .query_row("SELECT id, queues FROM queue_configs ORDER BY id DESC LIMIT 1", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()
        .map_err(classify)?;
    if let Some((id, json)) = queues {
        let parsed: Vec<QueueJson> =
            serde_json::from_str(&json).map_err(|e| corrupt("queue configuration", id)(e.to_string()))?;
        out.queues = Some(parsed.into_iter().map(QueueSpec::from).collect());
    }

    let mut stmt = conn.prepare("SELECT node FROM node_drains ORDER BY node").map_err(classify)?;
    out.drained_nodes = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(classify)?
        .collect::<Result<_, _>>()
        .map_err(classify)?;

    let mut stmt = conn.prepare("SELECT id, record FROM plan_reservations ORDER BY id").map_err(classify)?;
    let rows: Vec<(i64, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(classify)?
        .collect::<Result<_, _>>()
        .map_err(classify)?;
    for (id, text) in rows {
        let record = plan_from_json(id as u64, &text).map_err(corrupt("plan reservation", id))?;
        out.next_reservation_id = out.next_reservation_id.max(record.id.0.saturating_add(1));
        out.plan_reservations.push(record);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    /// A start-up read walks indexes only, so its cost follows what it reads, not the history.
    #[test]
    fn a_start_up_read_scans_no_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let conn = store.reader().unwrap();
        for (ids, args) in [(LIVE_APP_IDS, None), (retention::NEWEST_ENDED_IDS, Some(10_000i64))] {
            for sql in records_of(ids) {
                let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
                let plan: Vec<String> = stmt
                    .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                let scans: Vec<&String> =
                    plan.iter().filter(|l| l.starts_with("SCAN") && !l.contains("USING")).collect();
                assert!(scans.is_empty(), "{sql}: {plan:?}");
            }
        }
    }
}
