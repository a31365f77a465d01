//! `gantry bench load`'s flags and the child scheduler's log line.

use super::child::listening_addresses;
use super::*;

#[test]
fn the_listening_line_gives_both_addresses() {
    let log = "2025-01-01T00:00:00Z  INFO gantry_scheduler: gantry-scheduler listening api=127.0.0.1:4000 agents=127.0.0.1:4001\n";
    let (api, agents) = listening_addresses(log).expect("found");
    assert_eq!((api.port(), agents.port()), (4000, 4001));
    assert!(listening_addresses("INFO something else api=1").is_none());
}

#[test]
fn defaults_parse_and_bad_arguments_are_refused() {
    let a = LoadArgs::from_flags(["--duration", "90s"]).expect("parses");
    assert_eq!((a.agents, a.duration, a.run_time, a.container_memory), (1000, 90_000, 5_000, 256 << 20));
    check_args(&a).expect("defaults are valid");
    for flags in [
        &["--agents", "0"][..],
        &["--status-hz", "0"],
        &["--submit-rate=-1"],
        &["--container-cpu-millis", "20000"],
    ] {
        let a = LoadArgs::from_flags(flags.iter().copied()).expect("parses");
        assert!(matches!(check_args(&a), Err(LoadError::Args(_))), "{flags:?} accepted");
    }
    assert!(LoadArgs::from_flags(["--scheduler", "http://127.0.0.1:1"]).is_err(), "needs --agent-endpoint");
    assert!(LoadArgs::from_flags(["--duration", "soon"]).is_err());
}
