//! Vulkan-only tests, runnable on any Vulkan device (lavapipe in CI) under the Khronos
//! validation layer, where any validation message fails the test: memory export/import,
//! shared images, the pool's Vulkan side, semaphores, host memory, the inline-kernel
//! capability check, and the shipped SPIR-V. Without a Vulkan device each test prints
//! `SKIP <test>: <reason>`; REQUIRE_VULKAN=1 (or REQUIRE_GPU=1) makes that a failure.
//!
//! One binary for the area (what the GPU machine receives is size-limited): tests that count
//! descriptors hold `common::serial()`, every other test `common::shared()`, so that no test
//! of another module runs beside a count.

mod host_memory;
mod image;
mod image_handles;
mod inline;
#[cfg(target_os = "linux")]
mod ipc;
mod memory;
mod pacer;
mod pool;
mod repo;
mod semaphore;
mod shaders;
mod spheres;
