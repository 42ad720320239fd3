//! [`CuvkPlugin`]: the device callback, the adoption at `RenderStartup`, the status in both
//! worlds.

use bevy::app::{App, Plugin, PluginGroup, PluginGroupBuilder};
use bevy::ecs::change_detection::DetectChanges;
use bevy::log::{info, warn};
use bevy::prelude::{Commands, Res, ResMut, Resource};
use bevy::prelude::{IntoScheduleConfigs, SystemSet};
use bevy::render::render_asset::prepare_assets;
use bevy::render::renderer::raw_vulkan_init::{AdditionalVulkanFeatures, RawVulkanInitSettings};
use bevy::render::renderer::{RenderDevice, RenderQueue};
use bevy::render::renderer::{RenderGraph, RenderGraphSystems};
use bevy::render::texture::GpuImage;
use bevy::render::{
    ExtractSchedule, MainWorld, Render, RenderApp, RenderPlugin, RenderStartup, RenderSystems,
};

use crate::device::{adopt, AdoptOptions};
use crate::extensions;
use crate::image::{acquire_images, publish_gpu_images, release_images, AcquiredImages};
use crate::late::flush_late_work;
use crate::CuvkImages;
use crate::{CuvkDevice, CuvkError, CuvkStatus};

/// Pairs Bevy's renderer with CUDA: enables what sharing needs on Bevy's Vulkan device, adopts
/// the device into cuvk when the renderer starts, opens the CUDA device with the same UUID, and
/// publishes [`CuvkStatus`] (and, when ready, [`CuvkDevice`]) in the main and render worlds,
/// with one log line. Bevy keeps running where CUDA cannot work; the status says why.
///
/// It must be built **before** `RenderPlugin`, which creates the device:
///
/// ```no_run
/// use bevy::prelude::*;
/// use bevy::render::RenderPlugin;
/// use bevy_cuvk::{CuvkPlugin, CuvkPluginGroupExt};
///
/// // Either way:
/// App::new().add_plugins(DefaultPlugins.with_cuvk(CuvkPlugin::default()));
/// App::new().add_plugins(DefaultPlugins.build().add_before::<RenderPlugin>(CuvkPlugin::default()));
/// ```
///
/// Added after `RenderPlugin`, it reports [`CuvkError::AddedAfterRenderPlugin`] and does
/// nothing else.
#[derive(Debug, Clone)]
pub struct CuvkPlugin {
    /// Open CUDA (default `true`); `false` leaves the status `Unavailable` with
    /// [`CuvkError::Disabled`] (for a forced fallback), after still checking that Bevy's
    /// device could share.
    pub use_cuda: bool,
    /// Ask for `VK_NVX_binary_import` and `VK_NVX_image_view_handle` where the driver offers
    /// them (default `true`): CUDA kernels recorded in Bevy's own command buffers.
    pub inline_kernels: bool,
    /// Record the validation layer's messages ([`CuvkDevice::validation_messages`]) where
    /// Bevy's instance has `VK_EXT_debug_utils` (wgpu's validation flags, on in debug builds
    /// or with `WGPU_VALIDATION=1`). Default `false`: wgpu already logs them.
    pub record_validation: bool,
}

impl Default for CuvkPlugin {
    fn default() -> Self {
        Self {
            use_cuda: true,
            inline_kernels: true,
            record_validation: false,
        }
    }
}

/// The plugin's settings as the render world's systems need them.
#[derive(Resource, Debug, Clone, Copy)]
struct CuvkRenderSettings(AdoptOptions);

impl Plugin for CuvkPlugin {
    fn build(&self, app: &mut App) {
        let added_after_render = app.is_plugin_added::<RenderPlugin>();
        if !added_after_render {
            let inline = self.inline_kernels;
            let mut settings = app
                .world_mut()
                .get_resource_or_init::<RawVulkanInitSettings>();
            // SAFETY: the callback adds only extensions the physical device supports (each
            // checked with `supports_extension`) and chains the bufferDeviceAddress feature only
            // where the device offers it and no struct for it is in the chain yet; it removes
            // and turns off nothing.
            unsafe {
                settings.add_create_device_callback(move |args, adapter, extra| {
                    extensions::apply(args, adapter, extra, inline);
                });
            }
        }
        app.init_resource::<CuvkStatus>();
        app.insert_resource(CuvkRenderSettings(AdoptOptions {
            use_cuda: self.use_cuda,
            record_validation: self.record_validation,
            added_after_render,
        }));
    }

    fn finish(&self, app: &mut App) {
        let Some(settings) = app.world().get_resource::<CuvkRenderSettings>().copied() else {
            return;
        };
        match app.get_sub_app_mut(RenderApp) {
            Some(render_app) => {
                render_app
                    .insert_resource(settings)
                    .init_resource::<CuvkStatus>()
                    .init_resource::<CuvkImages>()
                    .init_resource::<AcquiredImages>()
                    .configure_sets(
                        RenderGraph,
                        (
                            CuvkSystems::Acquire.in_set(RenderGraphSystems::Begin),
                            CuvkSystems::Release
                                .after(RenderGraphSystems::Render)
                                .before(RenderGraphSystems::Submit),
                        ),
                    )
                    .add_systems(RenderStartup, adopt_device)
                    .add_systems(ExtractSchedule, publish_status)
                    .add_systems(
                        Render,
                        publish_gpu_images
                            .in_set(RenderSystems::PrepareAssets)
                            .after(prepare_assets::<GpuImage>),
                    )
                    .add_systems(
                        RenderGraph,
                        (
                            acquire_images.in_set(CuvkSystems::Acquire),
                            release_images.in_set(CuvkSystems::Release),
                            flush_late_work.in_set(RenderGraphSystems::Finish),
                        ),
                    );
                #[cfg(target_os = "linux")]
                render_app.add_systems(
                    RenderGraph,
                    crate::subscriber::release_held_frame.in_set(RenderGraphSystems::Finish),
                );
            }
            None => {
                let status = CuvkStatus::unavailable(&CuvkError::NoRenderer);
                warn!("{status}");
                app.insert_resource(status);
            }
        }
    }
}

/// Where the plugin hands shared images ([`CuvkImages`]) between CUDA and Bevy in the
/// `RenderGraph` schedule. Systems that use shared images in Bevy's queue — inline kernels
/// writing them, passes reading them — go between the two: any system in
/// `RenderGraphSystems::Render` is after [`CuvkSystems::Acquire`]; one placed after `Render`
/// must be `.before(CuvkSystems::Release)`. (Bevy's `Readback` and screenshots of a shared
/// image run after the graph, outside that window: copy it in a pass of your own instead.)
/// After `Submit`, in `RenderGraphSystems::Finish`, the plugin signals what
/// [`crate::StreamSync::signal_after_frame`] asked for and frees what was dropped.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CuvkSystems {
    /// In `RenderGraphSystems::Begin`: the shared images, from CUDA to Bevy's queue.
    Acquire,
    /// After `RenderGraphSystems::Render`, before `Submit`: back to `GENERAL`, to CUDA.
    Release,
}

/// `RenderStartup` (each time Bevy acquires a render device): adopts it and opens CUDA.
fn adopt_device(
    mut commands: Commands,
    settings: Res<CuvkRenderSettings>,
    device: Res<RenderDevice>,
    queue: Res<RenderQueue>,
    extra: Option<Res<AdditionalVulkanFeatures>>,
) {
    // A new render device (Bevy's renderer recovery): images of the old one are not shared.
    commands.insert_resource(CuvkImages::default());
    commands.insert_resource(AcquiredImages::default());
    match adopt(settings.0, &device, &queue, extra.as_deref()) {
        Ok(cuvk) => {
            let status = CuvkStatus::Ready {
                inline_kernels: cuvk.inline_kernels(),
                device: cuvk.describe(),
            };
            info!("{status}");
            commands.insert_resource(cuvk);
            commands.insert_resource(status);
        }
        Err(e) => {
            let status = CuvkStatus::unavailable(&e);
            match e {
                CuvkError::Disabled => info!("{status}"),
                _ => warn!("{status}"),
            }
            commands.remove_resource::<CuvkDevice>();
            commands.insert_resource(status);
        }
    }
}

/// `ExtractSchedule`: copies a new status (and the device) into the main world.
fn publish_status(
    status: Res<CuvkStatus>,
    device: Option<Res<CuvkDevice>>,
    mut main: ResMut<MainWorld>,
) {
    if !status.is_changed() {
        return;
    }
    main.insert_resource(status.clone());
    match device {
        Some(device) => main.insert_resource(device.clone()),
        None => {
            main.remove_resource::<CuvkDevice>();
        }
    }
}

/// Adds [`CuvkPlugin`] to a plugin group at the right place: before `RenderPlugin` (or at the
/// end where the group has none, where it then reports that there is no renderer).
pub trait CuvkPluginGroupExt: PluginGroup {
    /// `self` with `plugin` added before its `RenderPlugin`.
    fn with_cuvk(self, plugin: CuvkPlugin) -> PluginGroupBuilder {
        let group = self.build();
        if group.contains::<RenderPlugin>() {
            group.add_before::<RenderPlugin>(plugin)
        } else {
            group.add(plugin)
        }
    }
}

impl<G: PluginGroup> CuvkPluginGroupExt for G {}
