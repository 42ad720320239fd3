//! Whether recorded CUDA work has completed, asked without blocking: the probes of drops that
//! must not free what a stream still uses (shared buffers, staging copies, semaphore imports).

use cudarc::driver::CudaEvent;

/// Whether every event's recorded work has completed (`cuEventQuery`). An error counts as
/// done: the context is then broken and runs nothing more; the error is recorded on it.
pub(crate) fn events_complete<'a>(events: impl IntoIterator<Item = &'a CudaEvent>) -> bool {
    events.into_iter().all(|event| {
        let ctx = event.context();
        ctx.record_err(ctx.bind_to_thread());
        match event.try_is_complete() {
            Ok(done) => done,
            Err(e) => {
                ctx.record_err(Err::<(), _>(e));
                true
            }
        }
    })
}
