//! Vulkan semaphores shared with CUDA: the one place a [`Semaphore`] and its CUDA import
//! ([`ExternalSemaphore`]) are paired, sharing one signal ledger.

use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::cuda::{CudaSemaphoreType, ExternalSemaphore};
use crate::error::Result;
use crate::interop::Bridge;
use crate::vulkan::{Semaphore, SemaphoreDesc, SemaphoreKind};

/// Imports `semaphore` (created exportable) into CUDA with the handle type matching its kind.
/// The import keeps the semaphore alive and shares its ledger, so timeline values must
/// increase across both APIs.
pub fn import_semaphore(
    cuda: &Arc<CudaContext>,
    semaphore: &Arc<Semaphore>,
) -> Result<ExternalSemaphore> {
    let ty = match semaphore.kind() {
        SemaphoreKind::Binary => CudaSemaphoreType::Binary,
        SemaphoreKind::Timeline { .. } => CudaSemaphoreType::Timeline,
    };
    let handle = semaphore.export_for_import()?;
    // SAFETY: the handle was just exported from `semaphore`, whose type matches `ty`; the
    // ledger is the semaphore's own; the Arc keeps the semaphore alive.
    let mut imported = unsafe {
        ExternalSemaphore::import(
            cuda,
            handle,
            ty,
            semaphore.ledger().clone(),
            Some(semaphore.clone()),
        )
    }?;
    // One drop budget for the Vulkan context and everything shared on it; a drop that gives up
    // releases the queue's waits for what this import would signal (see `teardown`).
    let paired = semaphore.clone();
    imported.share_drop_budget(
        semaphore.context().drop_budget().clone(),
        Box::new(move || paired.abandon_queue_waits()),
    );
    Ok(imported)
}

/// A Vulkan semaphore and its CUDA import.
pub struct SharedSemaphore {
    /// The Vulkan semaphore.
    pub vulkan: Arc<Semaphore>,
    /// Its CUDA import.
    pub cuda: ExternalSemaphore,
}

impl Bridge {
    /// Creates an exportable semaphore of `kind` and imports it into CUDA.
    pub fn create_semaphore(&self, kind: SemaphoreKind) -> Result<SharedSemaphore> {
        let vulkan = Semaphore::new(
            &self.vulkan,
            SemaphoreDesc {
                kind,
                exportable: true,
            },
        )?;
        let cuda = import_semaphore(&self.cuda, &vulkan)?;
        Ok(SharedSemaphore { vulkan, cuda })
    }
}
