//! MIG: a GPU in MIG mode is sampled as the whole GPU and as each of its instances.

use super::*;

/// What a MIG instance has of its own; the rest belongs to its GPU.
pub(super) const MIG_INSTANCE_FIELDS: [Field; 3] = [Field::Memory, Field::Processes, Field::Gpm];

impl NvmlBackend {
    /// The MIG instances of GPU `index`, each with its scope: the GPU-instance id GPM needs and
    /// a handle of its own on the parent.
    pub(super) fn mig_instances(
        &self,
        index: u32,
        gpu: &Device<'static>,
    ) -> Vec<(Device<'static>, Scope)> {
        let slots = match gpu.mig_device_count() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(gpu = index, error = %e, "MIG is enabled but its instances cannot be counted; sampling the whole GPU only");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for slot in 0..slots {
            // Slots without an instance answer NotFound: MIG slots are sparse.
            let Ok(instance) = gpu.mig_device_by_index(slot) else {
                continue;
            };
            let scope = self.gpu_instance_id(&instance).and_then(|gpu_instance_id| {
                Ok(Scope::MigInstance {
                    // A second handle on the same GPU: handles are plain pointers.
                    parent: self.nvml.device_by_index(index)?,
                    parent_index: index,
                    gpu_instance_id,
                })
            });
            match scope {
                Ok(scope) => out.push((instance, scope)),
                Err(e) => {
                    tracing::warn!(gpu = index, slot, error = %e, "cannot open a MIG instance (its GPU-instance id or its GPU's handle); skipping it")
                }
            }
        }
        tracing::info!(
            gpu = index,
            instances = out.len(),
            "MIG is enabled: sampling each instance as well as the whole GPU"
        );
        out
    }

    fn gpu_instance_id(&self, instance: &Device<'static>) -> Result<u32, NvmlError> {
        let get = self
            .hot
            .gpu_instance_id
            .ok_or(NvmlError::FunctionNotFound)?;
        let mut id = 0;
        // SAFETY: a live MIG device handle and a pointer to a c_uint, as nvml.h declares.
        nvml_try(unsafe { get(instance.handle(), &mut id) })?;
        Ok(id)
    }
}
