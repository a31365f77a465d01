//! Cluster descriptions: gantry's TOML (racks of node classes) and Alibaba's node list CSV,
//! both turned into the engine's [`gantry_engine::NodeSpec`]s.
