//! Re-adoption after an agent restart: the control directories of the previous run read back
//! into the registry, each container running again, ended while the agent was down, or lost.

use super::exits::{lost, recorded_exit};
use super::{
    Adopted, ExecError, Executor, ProcRef, REPORTED_FILE, Tracked, reap_if_own_zombie, started_at_ms,
};
use crate::model::ContainerKey;
use crate::shim::{self, EXIT_FILE, ExitRecord, PID_FILE, PidRecord, SPEC_FILE, ShimSpec};
use std::io;

impl Executor {
    /// Re-adopts the containers of a previous agent run, after a restart: a live supervisor (same
    /// pid and start time) → running again; a recorded exit → reported with its recorded time;
    /// neither → [`ExitReason::Lost`](crate::model::ExitReason::Lost) (and whatever is left in its
    /// cgroup is killed). Ended ones come out of the next [`Executor::collect_exits`].
    pub fn adopt(&self) -> Result<Adopted, ExecError> {
        let dir = &self.settings.containers_dir;
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Adopted::default()),
            Err(e) => return Err(ExecError::Io { what: "list", path: dir.clone(), source: e }),
        };
        // Other entries (a name that is no container's) are left alone.
        let mut ids: Vec<ContainerKey> =
            entries.filter_map(|e| ContainerKey::from_name(e.ok()?.file_name().to_str()?)).collect();
        ids.sort_unstable();
        let mut adopted = Adopted::default();
        for id in ids {
            if self.is_known(id) {
                continue;
            }
            let control = self.control_dir(id);
            crate::isolation::restrict_control_dir(&control);
            let spec = shim::read_json::<ShimSpec>(&control.join(SPEC_FILE));
            let cgroup = match &spec {
                Ok(s) => s.cgroup.clone(),
                Err(_) => self.layout.container(&self.settings.cgroup_name, id),
            };
            if control.join(REPORTED_FILE).exists() {
                // A cgroup whose removal failed earlier.
                if let Some(cg) = cgroup.filter(|cg| cg.exists()) {
                    let _ = cg.remove();
                }
                continue;
            }
            let pid = shim::read_json::<PidRecord>(&control.join(PID_FILE)).ok();
            let mut t = Tracked {
                app_id: spec.as_ref().map_or(0, |s| s.app_id),
                started_at_ms: started_at_ms(&control),
                control: control.clone(),
                cgroup: cgroup.clone(),
                memory_limit: spec.as_ref().map_or(0, |s| s.limits.memory_bytes),
                uid: spec.as_ref().map_or(0, |s| s.uid),
                disk_limit: spec.as_ref().map_or(0, |s| s.disk_bytes),
                shim: pid.map_or(ProcRef { pid: 0, start_time: 0 }, |r| ProcRef {
                    pid: r.shim_pid,
                    start_time: r.shim_start_time,
                }),
                cmd: pid.map_or(ProcRef { pid: 0, start_time: 0 }, |r| ProcRef {
                    pid: r.pid,
                    start_time: r.start_time,
                }),
                child: None,
                ended: true,
                watched: false,
            };
            let exit = if let Ok(rec) = shim::read_json::<ExitRecord>(&control.join(EXIT_FILE)) {
                reap_if_own_zombie(t.shim);
                recorded_exit(id, &control, &rec, cgroup.as_ref(), t.memory_limit)
            } else if pid.is_some() && t.shim.pid != 0 && t.shim_alive() {
                t.ended = false;
                self.lock().containers.insert(id, t);
                adopted.running.push(id);
                continue;
            } else {
                tracing::warn!("container {id}: supervisor gone without an exit record; reporting it lost");
                lost(id, cgroup.as_ref(), t.cmd)
            };
            let mut inner = self.lock();
            inner.containers.insert(id, t);
            inner.pending.push(exit);
            adopted.ended.push(id);
        }
        Ok(adopted)
    }
}
