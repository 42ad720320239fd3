//! Whether CUDA can work with Bevy's renderer, and why not.

use bevy::prelude::Resource;

/// Whether CUDA shares memory with Bevy's renderer: a resource in the main world and in the
/// render world.
///
/// # When it is known
///
/// It is [`CuvkStatus::Pending`] until the renderer has started. The plugin decides in the
/// render world's `RenderStartup` schedule, which Bevy runs at the first extraction (at the end
/// of the main world's first `App::update`, pipelined rendering or not), and the same
/// extraction (`ExtractSchedule`) copies the outcome into the main world, with a clone of
/// [`crate::CuvkDevice`] when it is [`CuvkStatus::Ready`]. So:
///
/// - render world: `Ready` or `Unavailable` (and `CuvkDevice` when ready) in every `Render`
///   and `RenderGraph` system from the first frame on; create shared resources there, in a
///   system that takes `Option<Res<CuvkDevice>>`;
/// - main world: `Pending` during the first update, the outcome from the second update on; a
///   system with `run_if(resource_changed::<CuvkStatus>)` runs in the first update (the
///   resource was added: `Pending`), then once with the outcome (and again if the renderer is
///   recreated, when `RenderStartup` runs again and the plugin decides anew).
///
/// Bevy keeps running either way: use a fallback (WGSL compute) where it is
/// [`CuvkStatus::Unavailable`].
#[derive(Resource, Debug, Clone, PartialEq, Eq, Default)]
pub enum CuvkStatus {
    /// The renderer has not started yet.
    #[default]
    Pending,
    /// Bevy's Vulkan device was adopted and paired with the CUDA device of the same UUID:
    /// [`crate::CuvkDevice`] is a resource in both worlds.
    Ready {
        /// CUDA kernels can be recorded into Bevy's command buffers (`VK_NVX_binary_import`
        /// and buffer device addresses are enabled): no cross-API synchronisation needed.
        inline_kernels: bool,
        /// The GPU, as "name (UUID)".
        device: String,
    },
    /// CUDA cannot work with this renderer; the reason says why (no CUDA driver, not the
    /// Vulkan backend, an extension missing, the plugin added after `RenderPlugin`, ...).
    Unavailable {
        /// Why, in words (the [`CuvkError`]'s message).
        reason: String,
        /// The rule cuvk refused Bevy's device by, where it did ([`cuvk::Rule`]: the same code
        /// and name the C ABI and the Python module report), to match on instead of the
        /// words; `None` where no cuvk rule was broken (no renderer, CUDA turned off, no CUDA
        /// driver, another backend, ...).
        rule: Option<cuvk::Rule>,
    },
}

impl CuvkStatus {
    /// Whether CUDA is ready.
    pub fn is_ready(&self) -> bool {
        matches!(self, CuvkStatus::Ready { .. })
    }
    /// Why CUDA is unavailable (`None` while pending or when ready).
    pub fn reason(&self) -> Option<&str> {
        match self {
            CuvkStatus::Unavailable { reason, .. } => Some(reason),
            _ => None,
        }
    }
    /// The cuvk rule Bevy's device was refused by, if one was ([`CuvkStatus::Unavailable`]).
    pub fn rule(&self) -> Option<cuvk::Rule> {
        match self {
            CuvkStatus::Unavailable { rule, .. } => *rule,
            _ => None,
        }
    }
    /// The status for `e`: its message and the cuvk rule it carries.
    pub(crate) fn unavailable(e: &CuvkError) -> Self {
        CuvkStatus::Unavailable {
            reason: e.to_string(),
            rule: e.rule(),
        }
    }
}

impl std::fmt::Display for CuvkStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CuvkStatus::Pending => f.write_str("CUDA interop: pending (renderer not started)"),
            CuvkStatus::Ready {
                inline_kernels,
                device,
            } => write!(
                f,
                "CUDA interop ready on {device} (kernels {})",
                if *inline_kernels {
                    "inside Bevy's queue (NVX) or on CUDA streams"
                } else {
                    "on CUDA streams"
                }
            ),
            CuvkStatus::Unavailable { reason, .. } => {
                write!(f, "CUDA interop unavailable: {reason}")
            }
        }
    }
}

/// Why [`crate::CuvkPlugin`] could not pair Bevy's renderer with CUDA.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CuvkError {
    /// The plugin was built after `RenderPlugin`: the device was created without it.
    #[error(
        "CuvkPlugin was added after RenderPlugin, so Bevy's device was created without what \
         sharing needs; add it before: DefaultPlugins.build().add_before::<RenderPlugin>(\
         CuvkPlugin::default()) or DefaultPlugins.with_cuvk(CuvkPlugin::default())"
    )]
    AddedAfterRenderPlugin,
    /// The render device was not created by Bevy's raw Vulkan initialisation (e.g.
    /// `RenderCreation::Manual`), so cuvk's device callback did not run.
    #[error(
        "Bevy's render device was not created through raw_vulkan_init (RenderCreation::Manual?), \
         so it lacks what sharing needs"
    )]
    CallbackNotRun,
    /// The app has no renderer (`RenderPlugin` missing, or no GPU backend).
    #[error("the app has no renderer (RenderPlugin missing or no GPU backend)")]
    NoRenderer,
    /// CUDA was turned off in the plugin's settings.
    #[error("CUDA turned off in CuvkPlugin's settings (use_cuda: false)")]
    Disabled,
    /// Bevy renders with another backend than Vulkan.
    #[error("Bevy renders with the {backend} backend; CUDA interop needs Vulkan")]
    NotVulkan {
        /// The backend Bevy uses.
        backend: String,
    },
    /// Bevy's Vulkan device cannot be adopted for sharing (an extension or feature missing,
    /// a Vulkan version too old, ...).
    #[error("Bevy's Vulkan device {device} cannot share memory with CUDA: {source}")]
    Vulkan {
        /// The adapter, by name.
        device: String,
        /// cuvk's refusal.
        #[source]
        source: cuvk::Error,
    },
    /// No CUDA driver on this machine.
    #[error("{source}")]
    NoCudaDriver {
        /// cuvk's error.
        #[source]
        source: cuvk::Error,
    },
    /// A shared buffer was asked for with a usage or initial data it cannot have.
    #[error(
        "a shared buffer of {len} elements (at least 1) cannot have usage {usage} (mapping is \
         refused) or {data} initial elements (0 or {len})"
    )]
    BufferUsage {
        /// The wgpu usage asked for.
        usage: String,
        /// Elements asked for.
        len: usize,
        /// Initial elements given.
        data: usize,
    },
    /// A shared image was asked for in a format CUDA does not share.
    #[error(
        "a shared image cannot have format {format}: CUDA shares R8/RG8/RGBA8/BGRA8 UNORM, \
         R8/RGBA8 UINT, R/RG/RGBA 16-bit float, R/RG/RGBA 32-bit uint and float, R32 sint \
         (not sRGB, depth or compressed formats)"
    )]
    ImageFormat {
        /// The format asked for.
        format: String,
    },
    /// cuvk refused to make shared memory or a semaphore, or a CUDA call on it failed.
    #[error("cuvk: {source}")]
    Shared {
        /// cuvk's error.
        #[source]
        source: cuvk::Error,
    },
    /// A CUDA driver call failed.
    #[error("{call} failed: {source}")]
    CudaCall {
        /// The call.
        call: &'static str,
        /// The driver's error.
        #[source]
        source: cuvk::cudarc::driver::DriverError,
    },
    /// Bevy's queue is not a Vulkan queue (wgpu's `as_hal` said no).
    #[error("Bevy's queue is not a Vulkan queue")]
    QueueNotVulkan,
    /// The `VkBuffer` wgpu gets over cuvk's memory could not be made.
    #[error("cannot alias cuvk's memory as a wgpu buffer: {reason}")]
    Alias {
        /// Why.
        reason: String,
    },
    /// The CUDA driver is there, but no CUDA device is Bevy's GPU (or it failed to open).
    #[error("no CUDA device for Bevy's GPU {device}: {source}")]
    Cuda {
        /// Bevy's GPU, as "name (UUID)".
        device: String,
        /// cuvk's error.
        #[source]
        source: cuvk::Error,
    },
}

impl CuvkError {
    /// The cuvk rule behind this error ([`cuvk::Error::rule`]), where cuvk refused something.
    pub fn rule(&self) -> Option<cuvk::Rule> {
        match self {
            CuvkError::Vulkan { source, .. } | CuvkError::NoCudaDriver { source } => source.rule(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same refusal as the C ABI's and Python's tests: the status carries cuvk's rule.
    #[test]
    fn refusals_carry_cuvks_rule_as_every_front_end_does() {
        let e = CuvkError::Vulkan {
            device: "test".into(),
            source: cuvk::Error::Layout(cuvk::LayoutError::ZeroSize { offset: 64 }),
        };
        let status = CuvkStatus::unavailable(&e);
        assert_eq!(status.rule(), Some(cuvk::Rule::LayoutZeroSize));
        assert_eq!(status.reason(), Some(e.to_string().as_str()));
        assert_eq!(CuvkStatus::unavailable(&CuvkError::NoRenderer).rule(), None);
    }
}
