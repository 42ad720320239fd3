//! The pair of devices — one Vulkan device and the CUDA device with the same UUID.

use std::sync::{Arc, OnceLock};

use ash::vk;
use cudarc::driver::{CudaContext, CudaStream};

use crate::cuda;
use crate::error::{Error, Result};
use crate::uuid::Uuid;
use crate::vulkan::{DeviceChoice, Validation, VulkanConfig, VulkanContext};

/// Buffer usages for shared buffers (Vulkan's flags). Every shared buffer is also a transfer
/// source and destination.
pub type BufferUsage = vk::BufferUsageFlags;

use crate::cuda::CudaDeviceChoice;

/// Options for [`Bridge::new`]. `BridgeConfig::default()` is CUDA device 0, no validation
/// layer, and no extensions beyond what sharing needs (cuvk always enables the platform's
/// external memory extension, and external semaphores, host-memory import, buffer device
/// addresses and `VK_NVX_binary_import` where the device has them).
#[derive(Debug, Clone, Default)]
pub struct BridgeConfig {
    /// The CUDA device; the Vulkan device is the one with the same UUID. Default: ordinal 0.
    pub cuda_device: CudaDeviceChoice,
    /// Validation layer use on the Vulkan side. Default: [`Validation::Off`].
    pub validation: Validation,
    /// Extra Vulkan instance extensions (e.g. for a window surface). Default: none.
    pub instance_extensions: Vec<&'static std::ffi::CStr>,
    /// Extra Vulkan device extensions (e.g. `VK_KHR_swapchain`). Default: none.
    pub device_extensions: Vec<&'static std::ffi::CStr>,
}

/// One Vulkan device and the CUDA device with the same UUID.
pub struct Bridge {
    pub(crate) vulkan: Arc<VulkanContext>,
    pub(crate) cuda: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    uuid: Uuid,
    granularity: OnceLock<u64>,
}

impl Bridge {
    /// Opens the CUDA device `config.cuda_device` and creates a Vulkan device on the physical
    /// device with the same `deviceUUID`.
    pub fn new(config: BridgeConfig) -> Result<Self> {
        let (cuda, uuid) = cuda::open(config.cuda_device)?;
        let vulkan = VulkanContext::new(VulkanConfig {
            validation: config.validation,
            device: DeviceChoice::Uuid(uuid),
            instance_extensions: config.instance_extensions,
            device_extensions: config.device_extensions,
        })?;
        Self::from_parts(vulkan, cuda)
    }

    /// Pairs an existing Vulkan context (e.g. wrapped from an engine with
    /// [`VulkanContext::from_existing`]) with a CUDA context, checking that both are the same
    /// GPU ([`Error::DeviceMismatch`] otherwise).
    pub fn from_parts(vulkan: Arc<VulkanContext>, cuda: Arc<CudaContext>) -> Result<Self> {
        let uuid = cuda::uuid_of(&cuda)?;
        if vulkan.info().device_uuid != uuid {
            return Err(Error::DeviceMismatch {
                vulkan: vulkan.info().device_uuid,
                cuda: uuid,
            });
        }
        let stream = cuda.default_stream();
        Ok(Self {
            vulkan,
            cuda,
            stream,
            uuid,
            granularity: OnceLock::new(),
        })
    }

    /// The Vulkan side.
    pub fn vulkan(&self) -> &Arc<VulkanContext> {
        &self.vulkan
    }
    /// The CUDA context.
    pub fn cuda(&self) -> &Arc<CudaContext> {
        &self.cuda
    }
    /// The CUDA stream the bridge's own copies run on (the context's default stream).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    /// The UUID both devices share.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// The minimum CUDA VMM allocation granularity for exportable memory, queried once.
    pub fn vmm_granularity(&self) -> Result<u64> {
        if let Some(&g) = self.granularity.get() {
            return Ok(g);
        }
        let (g, _) = cuda::vmm::allocation_granularity(&self.cuda, cuda::vmm::VmmExport::OsHandle)?;
        Ok(*self.granularity.get_or_init(|| g))
    }
}
