//! CUDA + Vulkan tests on a real GPU (the bridge, frame pacing, pinned host memory, shared
//! images, kernels inside Vulkan command buffers, the pool, virtual memory), under the Khronos
//! validation layer. Where there is no CUDA GPU each test prints `SKIP <test>: <reason>`;
//! REQUIRE_GPU=1 makes that a failure.
//!
//! One binary for the area (what the GPU machine receives is size-limited): tests that count
//! descriptors or GPU memory, or want the GPU to themselves, hold `common::serial()`, every
//! other test `common::shared()`.

mod bridge;
mod driver_lock;
mod drops;
mod exits;
#[cfg(target_os = "linux")]
mod fanout;
mod frames;
mod host;
mod image;
mod image_handles;
mod inline;
#[cfg(target_os = "linux")]
mod ipc;
mod pacer;
mod peers;
mod pool;
mod stream_order;
mod timeouts;
mod vmm;
