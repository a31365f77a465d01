//! The JSON inside the store's rows: serde mirrors of the engine's spec types (the engine has no
//! serde, deliberately) and the stored form of a plan reservation, including the form written
//! before issue 20, which is still read.

use super::{PlanReservationRecord, StoreError, resources};
use gantry_engine::{AppSpec, QueueSpec, RackAffinity, RequestSpec, ReservationId};
use serde::{Deserialize, Serialize};

/// Encodes a value for its column; one that cannot be encoded refuses its write (`what` names it).
pub(super) fn to_json<T: Serialize>(what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Refused(format!("{what} cannot be encoded: {e}")))
}

/// The stored form of a [`PlanReservationRecord`]: the definition in RDL's text form.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct PlanReservationJson {
    queue: String,
    name: String,
    user: String,
    priority: i32,
    arrival_ms: Option<u64>,
    deadline_ms: Option<u64>,
    rdl: String,
    submit_ms: u64,
    /// `[atom, start_ms, end_ms, bundles]` per piece (issue 20 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allocation: Option<Vec<[u64; 4]>>,
    /// Before issue 20, when the planner was linked in: `[start_ms, end_ms, cpu_millis,
    /// memory_bytes, gpus]` per piece, without the atom. Read, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pieces: Option<Vec<[u64; 5]>>,
}

/// The stored JSON form of a plan reservation.
pub(super) fn plan_to_json(record: &PlanReservationRecord) -> String {
    let r = &record.request;
    let j = PlanReservationJson {
        queue: r.queue.clone(),
        name: r.name.clone(),
        user: r.user.clone(),
        priority: r.priority,
        arrival_ms: r.arrival_ms,
        deadline_ms: r.deadline_ms,
        rdl: gantry_rdl::to_text(&r.definition),
        submit_ms: record.submit_ms,
        allocation: Some(
            record.allocation.iter().map(|p| [u64::from(p.atom), p.start_ms, p.end_ms, p.bundles]).collect(),
        ),
        pieces: None,
    };
    serde_json::to_string(&j).unwrap_or_default()
}

/// Reads a plan reservation's stored JSON form back.
pub(super) fn plan_from_json(id: u64, text: &str) -> Result<PlanReservationRecord, String> {
    let j: PlanReservationJson = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let definition = gantry_rdl::parse_text(&j.rdl).map_err(|e| e.to_string())?;
    let allocation = match (&j.allocation, &j.pieces) {
        (Some(a), _) => a
            .iter()
            .map(|&[atom, start_ms, end_ms, bundles]| {
                let atom = u32::try_from(atom).map_err(|_| format!("atom {atom} is out of range"))?;
                Ok(gantry_engine::AtomInterval { atom, start_ms, end_ms, bundles })
            })
            .collect::<Result<Vec<_>, String>>()?,
        // A record of the previous version: its pieces are resources over time, each one
        // atom's (the linked-in planner kept them so). They are attributed to atoms by
        // their bundle and window, exactly for one atom, a best effort for several atoms of
        // the same bundle (`gantry_engine::legacy_allocation`).
        (None, Some(pieces)) => {
            let pieces: Vec<gantry_engine::PlannedPiece> = pieces
                .iter()
                .map(|&[start_ms, end_ms, cpu, mem, gpus]| gantry_engine::PlannedPiece {
                    start_ms,
                    end_ms,
                    resources: resources(cpu, mem, u32::try_from(gpus).unwrap_or(u32::MAX)),
                })
                .collect();
            let arrival = j.arrival_ms.unwrap_or(j.submit_ms);
            gantry_engine::legacy_allocation(&definition, arrival, &pieces)
        }
        (None, None) => Vec::new(),
    };
    Ok(PlanReservationRecord {
        id: ReservationId(id),
        request: gantry_engine::ReservationRequest {
            queue: j.queue,
            name: j.name,
            user: j.user,
            priority: j.priority,
            arrival_ms: j.arrival_ms,
            deadline_ms: j.deadline_ms,
            definition,
        },
        submit_ms: j.submit_ms,
        allocation,
    })
}

// ---- serde mirrors of the engine's types -------------------------------------------------
//
// The engine has no serde (it depends on nothing it does not need), so the store keeps its own
// copies of the shapes it writes. Every field added later must be `#[serde(default)]`, so rows
// written before it still read.

/// What of an [`AppSpec`] is not in the `apps` columns.
#[derive(Serialize, Deserialize)]
pub(super) struct SpecJson {
    pub(super) requests: Vec<RequestJson>,
}

#[derive(Serialize, Deserialize)]
struct ResourcesJson {
    cpu_millis: u64,
    memory_bytes: u64,
    gpus: u32,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
enum RackJson {
    #[default]
    None,
    Preferred,
    Required,
}

#[derive(Serialize, Deserialize)]
pub(super) struct RequestJson {
    resources: ResourcesJson,
    count: u32,
    #[serde(default)]
    gang: bool,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    selector: Vec<(String, String)>,
    #[serde(default)]
    preferred: Vec<(String, String)>,
    #[serde(default)]
    rack_affinity: RackJson,
    #[serde(default)]
    master: bool,
    #[serde(default)]
    expected_ms: u64,
    #[serde(default)]
    slow_ms: u64,
    #[serde(default)]
    deadline_ms: u64,
}

#[derive(Serialize, Deserialize)]
pub(super) struct QueueJson {
    path: String,
    guaranteed: f64,
    maximum: f64,
}

impl From<&AppSpec> for SpecJson {
    fn from(s: &AppSpec) -> Self {
        SpecJson { requests: s.requests.iter().map(RequestJson::from).collect() }
    }
}

impl From<&RequestSpec> for RequestJson {
    fn from(r: &RequestSpec) -> Self {
        RequestJson {
            resources: ResourcesJson {
                cpu_millis: r.resources.cpu_millis,
                memory_bytes: r.resources.memory_bytes,
                gpus: r.resources.gpus,
            },
            count: r.count,
            gang: r.gang,
            priority: r.priority,
            selector: r.selector.clone(),
            preferred: r.preferred.clone(),
            rack_affinity: match r.rack_affinity {
                RackAffinity::None => RackJson::None,
                RackAffinity::Preferred => RackJson::Preferred,
                RackAffinity::Required => RackJson::Required,
            },
            master: r.master,
            expected_ms: r.expected_ms,
            slow_ms: r.slow_ms,
            deadline_ms: r.deadline_ms,
        }
    }
}

impl From<RequestJson> for RequestSpec {
    fn from(r: RequestJson) -> Self {
        RequestSpec {
            resources: resources(r.resources.cpu_millis, r.resources.memory_bytes, r.resources.gpus),
            count: r.count,
            gang: r.gang,
            priority: r.priority,
            selector: r.selector,
            preferred: r.preferred,
            rack_affinity: match r.rack_affinity {
                RackJson::None => RackAffinity::None,
                RackJson::Preferred => RackAffinity::Preferred,
                RackJson::Required => RackAffinity::Required,
            },
            master: r.master,
            expected_ms: r.expected_ms,
            slow_ms: r.slow_ms,
            deadline_ms: r.deadline_ms,
        }
    }
}

impl From<&QueueSpec> for QueueJson {
    fn from(q: &QueueSpec) -> Self {
        QueueJson { path: q.path.clone(), guaranteed: q.guaranteed, maximum: q.maximum }
    }
}

impl From<QueueJson> for QueueSpec {
    fn from(q: QueueJson) -> Self {
        QueueSpec { path: q.path, guaranteed: q.guaranteed, maximum: q.maximum }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_rows_without_newer_optional_fields_still_read() {
        let json = r#"{"requests":[{"resources":{"cpu_millis":1,"memory_bytes":2,"gpus":0},"count":4}]}"#;
        let spec: SpecJson = serde_json::from_str(json).unwrap();
        let r = RequestSpec::from(spec.requests.into_iter().next().unwrap());
        assert_eq!(r, RequestSpec { resources: resources(1, 2, 0), count: 4, ..RequestSpec::default() });
    }
}
