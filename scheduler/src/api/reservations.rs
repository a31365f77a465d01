//! The reservation API's JSON bodies, shaped after YARN's `ws/v1/cluster/reservation/*`
//! (`ReservationSubmissionRequestInfo`, `ReservationDefinitionInfo`, `ReservationListInfo`).
//!
//! A definition is given either YARN's way — `reservation-requests` with an interpreter
//! (0 `R_ANY`, 1 `R_ALL`, 2 `R_ORDER`, 3 `R_ORDER_NO_GAP`, planned as `R_ORDER`) and requests of
//! `capability`, `num-containers`, `concurrency` and `duration` — or in gantry's RDL (`rdl`: the
//! text form as a string, or the JSON form as an object), whose times count from `arrival`.
//! YARN's request becomes `atom(capability, concurrency, num-containers, duration,
//! num-containers × duration)`: `num-containers` containers of `duration` each, at least
//! `concurrency` at once.

use gantry_engine::{PlannedPiece, PlannedReservation, ReservationId, ReservationRequest};
use gantry_rdl::{self as rdl, Atom, Expr};
use gantry_sdk::abi::GantryResources;
use serde::{Deserialize, Serialize};

use crate::api::types::ResourceInfo;

const MIB: u64 = 1 << 20;

/// `POST /reservation/new-reservation`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewReservation {
    /// The id to submit under, `reservation_<n>`.
    #[serde(rename = "reservation-id")]
    pub reservation_id: String,
}

/// A reservation id as YARN writes it (`reservation_17`); plain numbers are accepted too.
pub fn parse_reservation_id(s: &str) -> Result<ReservationId, String> {
    let digits = s.strip_prefix("reservation_").unwrap_or(s);
    // YARN's own ids are reservation_<cluster timestamp>_<sequence>: take the sequence.
    let digits = digits.rsplit('_').next().unwrap_or(digits);
    match digits.parse::<u64>() {
        Ok(n) if n > 0 => Ok(ReservationId(n)),
        _ => Err(format!("`{s}` is not a reservation id like reservation_17")),
    }
}

/// The id's text form.
pub fn format_reservation_id(id: ReservationId) -> String {
    format!("reservation_{}", id.0)
}

/// YARN's resource capability in a reservation request (`memory` in MiB, `vCores`), plus
/// `gpus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capability {
    /// Memory, MiB.
    pub memory: u64,
    /// Cores.
    #[serde(rename = "vCores")]
    pub v_cores: u64,
    /// GPUs.
    #[serde(default)]
    pub gpus: u32,
}

/// One YARN reservation request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YarnRequest {
    /// One container's resources.
    pub capability: Capability,
    /// Containers in all.
    #[serde(rename = "num-containers")]
    pub num_containers: u32,
    /// Least containers running at once (a gang).
    #[serde(default = "one")]
    pub concurrency: u32,
    /// How long each container runs, ms.
    pub duration: u64,
}

fn one() -> u32 {
    1
}

/// YARN's `reservation-requests`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YarnRequests {
    /// 0 `R_ANY`, 1 `R_ALL`, 2 `R_ORDER`, 3 `R_ORDER_NO_GAP`.
    #[serde(rename = "reservation-request-interpreter", default)]
    pub interpreter: u8,
    /// The requests.
    #[serde(rename = "reservation-request")]
    pub requests: Vec<YarnRequest>,
}

/// A reservation's definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReservationDefinition {
    /// Earliest start, ms since the Unix epoch (default: now).
    #[serde(default)]
    pub arrival: Option<u64>,
    /// Deadline, ms since the Unix epoch (default: one plan horizon after the arrival).
    #[serde(default)]
    pub deadline: Option<u64>,
    /// A name for people.
    #[serde(rename = "reservation-name", default)]
    pub name: String,
    /// Higher is kept longer when a replan must reject something.
    #[serde(default)]
    pub priority: i32,
    /// YARN's form.
    #[serde(rename = "reservation-requests", default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<YarnRequests>,
    /// gantry's RDL: text form as a string, JSON form as an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdl: Option<serde_json::Value>,
}

/// `POST /reservation/submit` and `/reservation/update`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReservationSubmit {
    /// The plan queue (required to submit; an update may leave it out).
    #[serde(default)]
    pub queue: Option<String>,
    /// The id from `new-reservation` (required to update).
    #[serde(rename = "reservation-id", default)]
    pub reservation_id: Option<String>,
    /// What it needs.
    #[serde(rename = "reservation-definition")]
    pub definition: ReservationDefinition,
}

/// `POST /reservation/delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReservationDelete {
    /// The reservation.
    #[serde(rename = "reservation-id")]
    pub reservation_id: String,
}

/// Capacity held over a time range (YARN's `ResourceAllocationInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAllocation {
    /// Start, ms since the Unix epoch.
    pub start_time: u64,
    /// End (exclusive).
    pub end_time: u64,
    /// Held throughout.
    pub resource: ResourceInfo,
}

impl From<&PlannedPiece> for ResourceAllocation {
    fn from(p: &PlannedPiece) -> Self {
        ResourceAllocation {
            start_time: p.start_ms,
            end_time: p.end_ms,
            resource: ResourceInfo::from(p.resources),
        }
    }
}

/// A reservation in the plan (YARN's `ReservationInfo`, plus gantry's fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationInfo {
    /// Its id.
    #[serde(rename = "reservation-id")]
    pub reservation_id: String,
    /// `ACCEPTED` (in the plan), or `REJECTED` in a submission's answer.
    pub state: String,
    /// Why it was rejected.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The plan queue.
    pub queue: String,
    /// Where its applications go (submit with this queue or with `reservation-id`).
    #[serde(rename = "reservation-queue", default)]
    pub reservation_queue: String,
    /// Who asked.
    pub user: String,
    /// When it was accepted, ms since the Unix epoch.
    #[serde(rename = "acceptance-time", default)]
    pub acceptance_time: u64,
    /// Its name.
    #[serde(rename = "reservation-name", default)]
    pub name: String,
    /// Its priority.
    #[serde(default)]
    pub priority: i32,
    /// Window start, ms.
    #[serde(default)]
    pub arrival: u64,
    /// Deadline, ms.
    #[serde(default)]
    pub deadline: u64,
    /// Its definition in RDL's text form, times from `arrival`.
    #[serde(default)]
    pub rdl: String,
    /// Its allocation over time (left out of lists unless asked for).
    #[serde(rename = "resource-allocations", default)]
    pub resource_allocations: Vec<ResourceAllocation>,
}

impl ReservationInfo {
    /// The record of an accepted reservation; `queue_path` is its queue's path.
    pub fn accepted(r: &PlannedReservation, queue_path: &str) -> Self {
        ReservationInfo {
            reservation_id: format_reservation_id(r.id),
            state: "ACCEPTED".into(),
            reason: String::new(),
            queue: r.request.queue.clone(),
            reservation_queue: queue_path.to_owned(),
            user: r.request.user.clone(),
            acceptance_time: r.submit_ms,
            name: r.request.name.clone(),
            priority: r.request.priority,
            arrival: r.arrival_ms,
            deadline: r.deadline_ms,
            rdl: rdl::to_text(&r.request.definition),
            resource_allocations: r.pieces().iter().map(ResourceAllocation::from).collect(),
        }
    }
}

/// `GET /reservation/list`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationList {
    /// The reservations.
    pub reservations: Vec<ReservationInfo>,
}

/// `POST /reservation/optimize`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OptimizeInfo {
    /// Reservations the planner could move (accepted, not started).
    pub considered: usize,
    /// Reservations moved.
    pub moved: usize,
    /// Time the call took, ms.
    pub solve_ms: u64,
    /// Why the plan was kept, if it was.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kept_because: String,
}

impl ReservationDefinition {
    /// The engine's request, or what is wrong with the definition.
    pub fn to_request(&self, queue: String, user: String) -> Result<ReservationRequest, String> {
        let definition = match (&self.requests, &self.rdl) {
            (Some(_), Some(_)) => return Err("give `reservation-requests` or `rdl`, not both".into()),
            (None, None) => return Err("a definition needs `reservation-requests` or `rdl`".into()),
            (Some(y), None) => yarn_expr(y)?,
            (None, Some(serde_json::Value::String(text))) => {
                rdl::parse(text).map_err(|e| format!("rdl: {e}"))?
            }
            (None, Some(v @ serde_json::Value::Object(_))) => {
                rdl::parse_json(&v.to_string()).map_err(|e| format!("rdl: {e}"))?
            }
            (None, Some(_)) => {
                return Err("`rdl` must be a string (text form) or an object (JSON form)".into());
            }
        };
        gantry_sdk::names::check_name(&self.name, true).map_err(|p| format!("reservation-name {p}"))?;
        Ok(ReservationRequest {
            queue,
            name: self.name.clone(),
            user,
            priority: self.priority,
            arrival_ms: self.arrival,
            deadline_ms: self.deadline,
            definition,
        })
    }
}

/// YARN's requests as an RDL expression.
fn yarn_expr(y: &YarnRequests) -> Result<Expr, String> {
    if y.requests.is_empty() {
        return Err("reservation-request is empty".into());
    }
    if y.requests.len() > 1_000 {
        return Err("more than 1000 reservation requests".into());
    }
    let mut atoms = Vec::with_capacity(y.requests.len());
    for (i, r) in y.requests.iter().enumerate() {
        let bad = |m: &str| format!("reservation-request[{i}]: {m}");
        if r.num_containers == 0 || r.concurrency == 0 || r.duration == 0 {
            return Err(bad("num-containers, concurrency and duration must be at least 1"));
        }
        if r.concurrency > r.num_containers {
            return Err(bad("concurrency is larger than num-containers"));
        }
        let bundle = GantryResources::new(
            r.capability.v_cores.saturating_mul(1000),
            r.capability.memory.saturating_mul(MIB),
            r.capability.gpus,
        );
        let work = u64::from(r.num_containers).checked_mul(r.duration).ok_or_else(|| bad("too much work"))?;
        atoms.push(Expr::Atom(Atom {
            bundle,
            min_parallel: r.concurrency,
            max_parallel: r.num_containers,
            min_lease_ms: r.duration,
            work,
        }));
    }
    let expr = if atoms.len() == 1 {
        atoms.pop().unwrap_or_else(|| unreachable!("one atom"))
    } else {
        match y.interpreter {
            0 => Expr::Any(atoms),
            1 => Expr::All(atoms),
            2 | 3 => Expr::Order(atoms),
            n => return Err(format!("reservation-request-interpreter {n} is not 0..=3")),
        }
    };
    expr.validate().map_err(|e| e.to_string())?;
    Ok(expr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yarn_requests_become_atoms_and_bad_ones_are_refused() {
        let def: ReservationDefinition = serde_json::from_str(
            r#"{"arrival": 1000, "deadline": 601000, "reservation-name": "etl",
                "reservation-requests": {"reservation-request-interpreter": 2, "reservation-request": [
                  {"capability": {"memory": 2048, "vCores": 1}, "num-containers": 4, "concurrency": 2, "duration": 60000},
                  {"capability": {"memory": 1024, "vCores": 2}, "num-containers": 1, "duration": 30000}]}}"#,
        )
        .expect("json");
        let r = def.to_request("root.prod".into(), "alice".into()).expect("valid");
        let Expr::Order(parts) = &r.definition else { panic!("{:?}", r.definition) };
        assert_eq!(
            parts[0],
            Expr::Atom(Atom {
                bundle: GantryResources::new(1000, 2048 * MIB, 0),
                min_parallel: 2,
                max_parallel: 4,
                min_lease_ms: 60_000,
                work: 240_000
            })
        );
        assert_eq!(
            rdl::to_text(&r.definition),
            rdl::to_text(&rdl::parse(&rdl::to_text(&r.definition)).expect("round trip"))
        );

        let mut both = def.clone();
        both.rdl = Some(serde_json::Value::String("atom(1c/1GiB, 1, 1, 1s, 1s)".into()));
        assert!(both.to_request("q".into(), "u".into()).is_err());
        let mut gang = def.clone();
        if let Some(y) = &mut gang.requests {
            y.requests[0].concurrency = 5;
        }
        assert!(gang.to_request("q".into(), "u".into()).unwrap_err().contains("concurrency"));
        let text = ReservationDefinition {
            rdl: Some(serde_json::Value::String("atom(1c/1GiB, 1, 2, 1m, 3m)".into())),
            requests: None,
            ..def
        };
        assert!(text.to_request("q".into(), "u".into()).is_ok());
        let spoofed = ReservationDefinition { name: "etl\u{202E}dorp".into(), ..text.clone() };
        assert_eq!(
            spoofed.to_request("q".into(), "u".into()).unwrap_err(),
            "reservation-name contains U+202E (RIGHT-TO-LEFT OVERRIDE)"
        );
        let broken = ReservationDefinition {
            rdl: Some(serde_json::Value::String("atom(1c/1GiB, 2, 1, 1m, 3m)".into())),
            ..text
        };
        let err = broken.to_request("q".into(), "u".into()).unwrap_err();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn ids_read_as_yarn_writes_them() {
        assert_eq!(parse_reservation_id("reservation_17"), Ok(ReservationId(17)));
        assert_eq!(parse_reservation_id("reservation_1700000000000_17"), Ok(ReservationId(17)));
        assert_eq!(parse_reservation_id("17"), Ok(ReservationId(17)));
        assert!(parse_reservation_id("reservation_x").is_err());
        assert!(parse_reservation_id("0").is_err());
    }
}
