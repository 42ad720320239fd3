//! cuvk's wgpu integration (feature `wgpu`, Cargo.toml's `[[test]] wgpu`): buffers and images
//! shared with wgpu on any Vulkan device (lavapipe in CI), CUDA and wgpu on one GPU, and the
//! wgpu particle example as a user runs it; under the validation layer, where any message fails
//! the test. Without the device each test prints why it skips; REQUIRE_VULKAN=1 and
//! REQUIRE_GPU=1 make that a failure.
//!
//! One binary for the area (what the GPU machine receives is size-limited): the GPU tests hold
//! `common::serial()`, every other test `common::shared()`.

mod gpu;
mod image;
mod particles_cli;
mod race;
mod support;
mod vulkan;
