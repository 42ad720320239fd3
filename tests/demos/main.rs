//! The demos as a user runs them (each a child process under the validation layer): the
//! particle and fluid demos headless and in a window under Xvfb on any Vulkan device (lavapipe
//! in CI), and their CUDA simulations on a real GPU, checked against CPU simulations. Without
//! a Vulkan device, a GPU or Xvfb the tests print why they skip; REQUIRE_VULKAN=1 and
//! REQUIRE_GPU=1 make that a failure.

mod demo;
mod fluid;
mod fluid_cli;
mod gpu_fluid;
mod gpu_particles;
mod multi_gpu;
mod particles;
mod particles_cli;
