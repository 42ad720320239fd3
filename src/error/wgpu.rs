//! Refusals and failures of the wgpu integration (feature `wgpu`).

use ash::vk;

/// A broken wgpu rule, or a failed wgpu call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WgpuError {
    /// A wgpu object is not on the Vulkan backend, the only one cuvk shares memory through.
    #[error("the wgpu {object} is on the {backend} backend; cuvk shares memory and semaphores through Vulkan only")]
    WrongBackend {
        /// Which object (adapter, device, queue, command encoder).
        object: &'static str,
        /// The backend it is on.
        backend: &'static str,
    },
    /// A wgpu call failed (its own message).
    #[error("{call} failed: {message}")]
    Call {
        /// The wgpu (or wgpu-hal) function.
        call: &'static str,
        /// What it reported.
        message: String,
    },
    /// A Vulkan image cuvk cannot present to wgpu as a texture.
    #[error("a {format:?} image cannot be a wgpu texture: {reason}")]
    NotTexture {
        /// The image's Vulkan format.
        format: vk::Format,
        /// Why not.
        reason: String,
    },
    /// wgpu accepted a submission call but did not hand the work to the driver (a
    /// validation error, which went to wgpu's error handler): its semaphore operations were
    /// withdrawn and no timeline value was recorded, so the same values may be used again.
    #[error(
        "wgpu did not submit the work (its error handler has the reason); the submission's \
         {withdrawn} semaphore operations were withdrawn and no timeline value was recorded"
    )]
    NotSubmitted {
        /// How many semaphore waits and signals were withdrawn from wgpu's queue.
        withdrawn: usize,
    },
}

impl WgpuError {
    /// What kind of failure this is.
    pub fn kind(&self) -> crate::ErrorKind {
        match self {
            WgpuError::WrongBackend { .. } | WgpuError::NotTexture { .. } => {
                crate::ErrorKind::Unsupported
            }
            WgpuError::Call { .. } => crate::ErrorKind::Driver,
            WgpuError::NotSubmitted { .. } => crate::ErrorKind::InvalidInput,
        }
    }
}
