//! The demos' simulations as the CPU computes them: the parameters and scripted input the GPU
//! kernels share, and a reference step the tests compare the GPU's results with.

pub mod fluid;
pub mod particles;
