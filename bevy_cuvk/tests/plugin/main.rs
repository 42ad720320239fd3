//! `bevy_cuvk` on whatever Vulkan device is here (lavapipe in CI): the plugin's status and
//! refusals, the WGSL particle path against the CPU reference, and the example in a window
//! under Xvfb. Without a Vulkan device every test skips (fails with `REQUIRE_VULKAN=1`).

mod app;
mod cli;
mod status;
mod wgsl_frame;
mod window;

// The example's simulation and its CPU reference, compiled into the tests as they are.
#[path = "../../examples/particles/cuda.rs"]
mod cuda;
#[path = "../../examples/particles/reference.rs"]
mod reference;
#[path = "../../examples/particles/sim.rs"]
mod sim;
