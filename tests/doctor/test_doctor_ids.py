"""Every finding id the doctor can name has a fix that is tested (applied in simulation and
re-diagnosed, or marked as host work with its reason) and a row in docs/doctor.md.

The ids are read from the doctor's source, so a new id without a scenario, a test or a doc row
fails here rather than slipping through."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import test_doctor_fixes

from gpuchain.doctor.local import LocalAnswer, local_chain
from gpuchain.doctor.model import NOT_SIMULATED
from gpuchain.sim import load_scenario, scenario_names

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = (
    "stack|policy|nfd|operand|operator|driver|toolkit|device-plugin|gpu|gfd|exporter|mig|node|workload|sandbox|vm"
)
#: Links whose check builds ``f"{link}.not-ready"`` (links.failures.not_ready and links.operand.simple).
NOT_READY_LINKS = ("driver", "toolkit", "device-plugin", "gfd", "exporter")
#: Ids whose scenario is a change made to a built cluster, with the test that applies their fix (in
#: test_doctor_fixes, or ``module::test`` in another test module of tests/doctor).
CLUSTER_TESTS = {
    "operator.node-unlabelled": "doctor.test_operator_labels_and_plugin_root::"
    "test_a_node_nfd_marks_by_class_that_the_operator_never_labelled_has_the_operator_restarted",
    "device-plugin.stale-driver-root": "doctor.test_operator_labels_and_plugin_root::"
    "test_gpu_pods_refused_for_driver_container_paths_on_an_opted_out_node_restart_the_plugin",
    "node.startup-taint-left": "test_doctor_startup_taints::"
    "test_an_efs_startup_taint_left_by_an_affected_driver_is_the_nodes_root_with_the_release_that_fixed_it",
    "node.gpu-pod-refused-before-plugin": "test_doctor_refused_before_plugin::"
    "test_a_pod_refused_before_the_plugin_registered_on_a_karpenter_node_is_recreated_and_karpenter_upgraded",
    "node.admission-refused": "test_doctor_admission_refused::"
    "test_a_best_effort_plugin_pod_refused_by_single_numa_node_on_an_affected_kubelet_names_the_patch_release",
    "node.quarantine-no-action": "test_doctor_remediator_quarantine::"
    "test_a_node_cordoned_and_tainted_for_a_none_action_condition_is_uncordoned_and_untainted",
    "node.quarantined": "test_doctor_remediator_quarantine::"
    "test_a_quarantine_waiting_on_a_named_remediation_is_a_warning_not_the_root",
    "node.pod-admitted-without-device": "test_doctor_state_files_and_admission::"
    "test_a_gpu_pod_without_its_driver_beside_a_registered_plugin_was_admitted_without_its_allocation",
    "driver.mig-allocation-hang": "test_doctor_runtime_binary_and_mig_handles::"
    "test_gpu_pods_stuck_creating_on_a_mig_node_under_a_570_driver_before_the_fix_are_the_driver",
    "driver.precompiled-no-graphics": "test_doctor_driver_graphics::"
    "test_a_precompiled_image_without_gl_is_the_driver_fault_on_the_graphics_pods_node",
    "toolkit.runtime-cgroup-driver": "test_doctor_runtime_binary_and_mig_handles::"
    "test_nvidia_runtime_pods_killed_on_a_k3s_containerd_before_the_systemd_cgroup_fix_are_the_toolkit",
    "toolkit.default-runtime-left": "test_doctor_runtime_binary_and_mig_handles::"
    "test_pods_without_gpus_refused_by_the_nvidia_hook_where_no_gpu_stack_runs_get_runc_back_as_default",
    "driver.gsp-xid": "test_doctor_runtime_binary_and_mig_handles::"
    "test_gsp_firmware_xids_in_the_kernel_log_are_the_driver_with_a_newer_release_as_the_repair",
    "node.gpu-xid": "test_doctor_kernel_xids::test_an_uncontained_memory_error_is_the_gpu_reset_on_the_node",
    "workload.gpu-xid": "test_doctor_kernel_xids::test_an_application_xid_is_a_warning_on_the_workload_not_an_error",
    "node.gpu-xid-noted": "test_doctor_kernel_xids::test_an_xid_the_catalog_leaves_alone_is_information",
    "driver.kernel-line": "test_doctor_kernel_xids::test_the_kernel_modules_own_errors_in_node_events_are_the_driver",
    "driver.sidecar-without-configs": "doctor.test_doctor_operand_images_and_mounts::"
    "test_a_gdrcopy_sidecar_on_a_mirror_the_policy_names_is_the_operator_release_that_mounts_it",
    "policy.invalid": "test_an_invalid_policy_is_reset_field_by_field_through_the_api",
    "operand.not-deployed": "test_a_missing_gpuchain_daemonset_is_never_recreated_by_hand",
    "node.runtime-unsupported": "test_a_runtime_the_toolkit_cannot_configure_is_node_work",
    "toolkit.runtime-class-missing": "test_the_runtime_class_a_plugin_chart_names_is_created_on_the_cluster",
    "device-plugin.off-gpu-node": "test_a_plugin_failing_on_a_node_without_gpus_gets_an_affinity_for_the_gpu_nodes",
    "device-plugin.hami-core-miscount": "doctor.test_doctor_hami_stack::"
    "test_hami_252_refusing_memory_for_a_wrapped_count_moves_to_253",
    "device-plugin.beside-host-plugin": "doctor.test_doctor_bottlerocket_host_plugin::"
    "test_applied_the_affinity_leaves_the_bottlerocket_node_to_its_own_plugin",
    "exporter.gpu-pv": "doctor.test_doctor_exporter_gpu_pv::"
    "test_applied_the_delete_leaves_the_gpu_pv_nodes_without_an_exporter_error",
    "driver.too-old": "test_a_cuda_validation_pod_refused_for_forward_compatibility_names_the_driver_too_old",
    "driver.fabric-manager": "test_cuda_not_initialised_on_a_running_driver_is_the_fabric_manager_not_the_toolkit",
    "workload.runtime-hook-failed": "test_gpu_pods_the_runtime_hook_refuses_to_start_are_the_toolkit_and_node_work",
    "driver.version-mismatch": "test_a_driver_library_version_mismatch_anywhere_is_the_driver_and_wants_a_reboot",
    "driver.not-on-node-image": "test_no_nvml_on_a_managed_node_image_is_the_image_not_the_toolkit",
    "driver.upgrading": "test_a_driver_pod_the_upgrade_restarts_is_information_not_a_fault",
    "driver.upgrade-held": "doctor.test_doctor_drains::"
    "test_a_node_failed_on_an_emptydir_gpu_pod_sets_pod_deletion_delete_emptydir_and_retries",
    "driver.upgrade-failed": "doctor.test_doctor_drains::"
    "test_a_node_left_upgrade_failed_with_nothing_holding_it_is_labelled_upgrade_required_to_retry",
    "sandbox.operand-off": "doctor.test_sandbox_chain::"
    "test_a_sandbox_validator_whose_deploy_label_was_left_paused_is_switched_back_on_with_the_plugin",
    "sandbox.disabled": "doctor.test_sandbox_chain::"
    "test_a_vm_node_left_without_its_validator_label_while_the_policy_turns_sandbox_workloads_off",
    "sandbox.operand-disabled": "doctor.test_sandbox_chain::test_a_sandbox_operand_the_policy_does_not_deploy_is_switched_on_in_the_policy",
    "sandbox.operand-missing": "doctor.test_sandbox_chain::"
    "test_a_sandbox_daemonset_kept_off_by_a_taint_gets_the_toleration_through_the_policy",
    "sandbox.operand-failing": "doctor.test_sandbox_chain::test_a_vgpu_manager_that_cannot_build_for_the_kernel_gets_the_catalogs_repair",
    "sandbox.operand-not-ready": "doctor.test_sandbox_chain::"
    "test_a_vgpu_manager_still_not_ready_holds_the_chain_at_the_driver_not_at_the_plugin",
    "sandbox.vgpu-vfs-missing": "doctor.test_sandbox_chain::"
    "test_virtual_functions_a_reboot_cleared_are_made_again_by_restarting_the_vgpu_manager",
    "sandbox.vgpu-manager-unanswered": "doctor.test_sandbox_chain::"
    "test_a_running_vgpu_manager_whose_driver_does_not_answer_nvidia_smi_is_restarted",
    "sandbox.vfio-unbound": "doctor.test_sandbox_chain::test_a_gpu_the_host_driver_keeps_from_vfio_pci_is_the_passthrough_nodes_driver_layer",
    "node.iommu-missing": "doctor.test_sandbox_chain::test_a_vfio_bind_the_kernel_refuses_is_the_nodes_missing_iommu",
    "exporter.nvml-missed": "doctor.test_exporter_nvml_missed::"
    "test_an_exporter_that_started_before_the_plugin_found_the_driver_is_restarted",
    "sandbox.vgpu-devices-missing": "doctor.test_sandbox_chain::"
    "test_vgpu_devices_never_created_for_a_failed_config_are_the_device_managers",
    "sandbox.nothing-advertised": "doctor.test_sandbox_chain::test_a_running_sandbox_plugin_that_announces_nothing_is_the_device_plugin_link",
    "vm.nvidia-runtime-default": "doctor.test_sandbox_kubevirt_plugin::"
    "test_the_nvidia_runtime_as_default_keeps_the_kubevirt_plugin_from_starting_and_runc_goes_back",
    "vm.plugin-failing": "doctor.test_sandbox_kubevirt_plugin::test_the_kubevirt_plugin_failing_for_another_reason_is_the_device_plugin_link",
    "vm.passthrough-unregistered": "doctor.test_vm_passthrough_names::"
    "test_v1_0_0_registering_nothing_for_a_gpu_its_pci_ids_lacks_is_repaired_by_v1_0_1",
    "vm.passthrough-misnamed": "doctor.test_vm_passthrough_names::"
    "test_a_bare_device_id_from_a_pre_v1_2_2_plugin_while_a_vm_asks_for_the_model_is_repaired_by_v1_2_2",
    "device-plugin.marked-unhealthy": "doctor.test_doctor_beneath_the_plugin::"
    "test_gpus_the_plugin_marks_unhealthy_for_its_own_reason_get_its_release_not_a_gpu_reset",
    "driver.in-use": "test_a_driver_that_cannot_unload_under_gpu_pods_is_drained_not_turned_off",
    "mig.partition-failed": "doctor.test_mig_partition::"
    "test_an_older_partitioner_refusing_a_size_of_its_gpu_is_the_mig_link_with_the_image_upstream_pins_now",
    "driver.module-held": "test_a_driver_that_cannot_unload_because_gdrdrv_holds_the_module_restarts_its_pod_not_turned_off",
    "driver.nvidiadriver-conflict": "test_two_nvidiadrivers_selecting_the_same_node_lose_the_newer_one",
    "driver.nvidiadriver-error": "test_a_failed_reconcile_is_quoted_and_the_fix_edits_that_nvidiadriver",
    "exporter.gpus-missing": "test_a_gpu_the_driver_stopped_listing_is_the_gpus_to_reset",
    "exporter.stale": "test_a_stopped_collection_collects_again_in_a_new_exporter_pod",
    "exporter.gpu-down": "test_a_gpu_that_stopped_answering_the_exporter_is_reset",
    "toolkit.validation-failed": "test_a_failing_toolkit_validation_is_the_toolkit_not_the_plugin_waiting_behind_it",
    "driver.validation-failed": "test_a_failing_cuda_validation_past_a_passed_toolkit_validation_is_the_driver_not_the_toolkit",
    "driver.not-validated": "test_operands_waiting_behind_a_validation_the_validator_never_completes_name_that_link",
    "toolkit.not-validated": "test_operands_waiting_behind_a_validation_the_validator_never_completes_name_that_link",
    "operand.not-created": "test_a_daemonset_whose_pods_the_api_refuses_gets_the_namespace_it_may_create_them_in",
    "toolkit.hook-failed": "test_an_operand_the_runtime_hook_refuses_to_start_is_the_toolkit_not_the_operand",
    "driver.not-installed": "test_an_operand_waiting_on_the_driver_root_is_the_driver_not_the_operand",
    "driver.gpu-unavailable": "test_gpu_pods_refused_because_nvml_fails_at_allocation_are_the_driver",
    "mig.unmanaged": "test_mig_on_gpus_no_mig_manager_manages_is_the_mig_link",
    "node.sandbox-failed": "test_operands_without_a_sandbox_after_the_toolkit_rewrote_containerd_are_the_runtime_config",
    "device-plugin.privileges-missing": "test_a_plugin_whose_settings_need_sys_admin_and_run_without_it_gets_the_capability",
    "toolkit.devices-denied": "test_a_plugin_whose_nvml_fails_with_unknown_error_at_every_start_is_the_low_level_runtime",
    "mig.no-instances": "test_the_plugins_panic_on_a_mig_gpu_with_no_instance_is_the_mig_link",
    "exporter.running-with-errors": "test_a_running_exporter_release_whose_log_says_it_fails_is_the_exporter",
    "gfd.running-with-errors": "test_a_running_gfd_without_labels_whose_log_says_why_is_gfd",
    "device-plugin.dra-conflict": "test_a_node_whose_gpus_a_device_plugin_and_a_dra_driver_both_announce_goes_to_one",
    "device-plugin.dra-unpublished": "test_a_node_handed_to_dra_whose_gpus_no_slice_publishes_gets_the_dra_plugin_turned_on",
    "device-plugin.dra-prepare-failed": "test_doctor_dra_prepare::"
    "test_a_claim_the_plugin_cannot_write_a_cdi_spec_for_restarts_the_dra_plugin",
    "device-plugin.dra-stale-driver": "test_dra_stale_plugin::"
    "test_a_slice_of_the_previous_driver_release_is_a_plugin_to_recreate",
    "device-plugin.stale-resource": "test_doctor_stale_resources::"
    "test_a_resource_no_plugin_serves_is_removed_from_the_node_status_not_taken_for_lost_gpus",
    "node.gpus-missing": "test_doctor_missing_gpus::"
    "test_a_p4d_that_advertises_seven_gpus_is_the_node_short_of_one_not_a_full_cluster",
    "node.kubelet-defect": "test_kubelet_defects::"
    "test_allocatable_zero_after_the_plugin_registered_again_on_a_110_kubelet_is_the_kubelet",
    "node.bundled-runc-defect": "test_bundled_runc::"
    "test_operands_that_runc_cannot_create_on_an_affected_rke2_release_are_the_node",
    "node.kubelet-allocatable-stale": "test_kubelet_defects::"
    "test_allocatable_zero_while_the_plugin_reports_every_gpu_healthy_is_the_kubelet_on_any_release",
    "device-plugin.registered-at-start": "test_kubelet_defects_plugin_found::"
    "test_a_plugin_whose_log_found_two_of_four_gpus_is_restarted_not_the_node",
    "toolkit.cri-unloaded": "doctor.test_cri_unloaded::"
    "test_a_worker_whose_containerd_serves_no_cri_under_an_nvidia_runtime_class_is_the_toolkit",
    "device-plugin.duplicate-resource": "doctor.test_plugin_pair::"
    "test_applied_the_label_leaves_the_node_to_hamis_plugin_alone",
    "toolkit.runtime-stopped": "test_doctor_source_classes::"
    "test_containerd_23_stopped_after_the_toolkits_drop_in_is_the_toolkit_with_its_config_source",
    "workload.untolerated-taint": "test_doctor_pending_workloads::"
    "test_a_gpu_deployment_that_does_not_tolerate_the_gpu_nodes_taint_gets_the_toleration_on_its_template",
    "workload.node-selector": "test_doctor_pending_workloads::"
    "test_a_selector_on_a_product_the_gpu_nodes_do_not_have_gets_the_value_they_carry",
    "workload.dra-unpublished": "test_doctor_pending_workloads::"
    "test_claims_no_dra_driver_publishes_for_get_the_dra_driver_installed",
    "workload.no-driver-in-pod": "test_doctor_user_pods::"
    "test_a_gpu_pod_without_the_driver_in_its_container_gets_the_nvidia_runtime_class_on_its_deployment",
    "workload.gpu-not-requested": "doctor.test_unallocated_gpu_pods::"
    "test_a_pod_placed_for_the_gpu_that_requests_none_is_given_the_request",
    "workload.dra-devices-tainted": "test_doctor_pending_workloads::"
    "test_claims_every_published_device_of_which_is_tainted_get_the_toleration_or_the_taint_removed",
    "device-plugin.known-defect": "test_doctor_known_releases::"
    "test_a_ready_plugin_that_keeps_restarting_on_a_release_with_that_defect_is_moved_to_the_fixed_release",
    "gfd.known-defect": "test_doctor_known_releases::"
    "test_a_chart_release_that_renders_no_gfd_is_upgraded_to_the_chart_that_does",
    "device-plugin.xid-marked": "test_doctor_beneath_the_plugin::"
    "test_an_application_xid_an_old_plugin_marked_is_a_plugin_restart_and_the_release_that_skips_it",
    "node.device-plugins-disabled": "test_doctor_lower_link_classes::"
    "test_a_kubelet_before_110_listing_no_gpu_under_a_device_plugin_is_the_node_with_the_feature_gate",
    "node.kubelet-socket-unseen": "test_doctor_unseen_socket_and_library_links::"
    "test_a_plugin_finding_no_kubelet_socket_under_a_gated_on_kubelet_is_the_node_with_the_kubelets_bind",
    "driver.library-unlinked": "test_doctor_unseen_socket_and_library_links::"
    "test_a_dra_plugin_missing_the_nvml_link_under_the_host_drivers_root_is_the_driver_and_ldconfig",
    "node.gpu-lost": "test_doctor_mig_and_lost_gpus::"
    "test_gpu_pods_refused_because_a_gpu_fell_off_the_bus_are_the_node_not_the_driver",
    "mig.not-ready": "test_doctor_upper_catalog::"
    "test_a_mig_manager_that_cannot_read_its_custom_layouts_is_the_mig_link_with_the_configmap_to_create",
    "workload.cuda-unusable": "test_doctor_beneath_the_plugin::"
    "test_cuda_busy_on_a_managed_gpu_pool_is_the_driver_and_the_pools_node_image_upgrade",
    "workload.resource-name-not-offered": "test_doctor_tracker_classes::"
    "test_a_pod_asking_for_whole_gpus_on_mixed_mig_nodes_is_told_the_mig_resource_to_ask_for",
    "device-plugin.placed-nowhere": "test_doctor_tracker_classes::"
    "test_a_plugin_daemonset_needing_labels_nothing_writes_gets_the_gpu_node_labelled_or_gfd_enabled",
    "workload.shared-request-too-large": "test_doctor_tracker_classes::"
    "test_a_pod_refused_for_asking_two_shared_gpus_asks_for_one_not_a_kubelet_restart",
    "operand.paused-for-driver-upgrade": "test_doctor_release_notes::"
    "test_operands_left_paused_after_the_driver_is_in_are_set_back_and_the_manager_moved_to_the_fixed_release",
    "device-plugin.tegra-unsupported": "test_tegra::test_plugin_before_tegra_support_on_a_jetson_moves_the_plugin",
    "toolkit.tegra-platform-missing": "test_tegra::test_tegra_plugin_without_the_platform_files_moves_the_toolkit",
    "device-plugin.validation-outbid": "test_opx44_plugin_validation::"
    "test_the_plugin_validation_refused_on_a_node_whose_pods_hold_every_gpu_turns_its_workload_off",
    "driver.talos-extensions-missing": "test_doctor_talos_extensions::"
    "test_a_talos_node_without_the_nvidia_handler_is_the_driver_repaired_by_an_installer_with_the_extensions",
    "toolkit.runtime-overridden": "test_doctor_runtime_override::"
    "test_a_toolkit_set_for_volume_mounts_whose_list_the_runtime_refuses_is_overridden_by_containerds_config",
    "nfd.known-leak": "test_doctor_nfd_failing::test_bundled_non_leaders_on_a_leaking_release_get_the_fixed_release",
    "nfd.oom-killed": "test_doctor_nfd_failing::test_a_fixed_release_or_a_lone_replica_gets_its_memory_limit_raised",
    "nfd.crash-loop": "test_doctor_nfd_failing::test_a_gc_in_a_crash_loop_is_quoted_from_its_state",
    "toolkit.torn-down": "test_doctor_toolkit_torn_down::"
    "test_an_old_operator_on_a_new_containerd_moves_to_the_release_that_fixed_it",
    "device-plugin.time-sliced-oom": "doctor.test_doctor_shared_oom::"
    "test_a_ready_tenant_out_of_cuda_memory_on_a_time_sliced_gpu_names_the_sharing_and_its_cotenants",
    "exporter.sidecar-unlabelled": "test_doctor_exporter_sidecars::"
    "test_a_native_sidecars_gpu_under_an_exporter_before_the_v1_client_gets_the_release_that_fixed_it",
    "device-plugin.disabled-in-policy": "test_doctor_plugin_disabled::"
    "test_a_device_plugin_switched_off_in_the_policy_while_pods_wait_is_switched_on_again",
    "device-plugin.rename-ignored": "test_doctor_plugin_rename::"
    "test_a_per_resource_rename_the_plugin_ignores_while_a_pod_waits_for_it_is_the_plugins_config",
    "device-plugin.cgpu-pod-limit": "doctor.test_doctor_ack_cgpu::test_card_over_the_pod_limit_scales_its_owner_down",
    "device-plugin.gpushare-unannounced": "doctor.test_doctor_ack_cgpu::"
    "test_a_cgpu_node_announcing_no_gpu_memory_restarts_its_gpushare_pod",
    "device-plugin.cgpu-os-defect": "doctor.test_doctor_ack_cgpu::"
    "test_old_cgpu_on_containeros_kernel_names_the_installer_release",
    "toolkit.kai-share-not-cdi": "doctor.test_doctor_kai_sharing::"
    "test_binder_without_cdi_on_a_cdi_runtime_names_the_chart_value_of_its_release",
    "workload.companion-untolerated-taint": "doctor.test_doctor_companion_taint::"
    "test_companion_kept_off_the_gpu_node_by_its_taint_gets_the_toleration",
    "workload.gpu-used-unrequested": "doctor.test_doctor_gpu_used_unrequested::"
    "test_unrequested_pod_on_a_taken_gpu_gets_a_gpu_limit",
    "node.lxd-gpu-not-passed": "doctor.test_lxd_gpu::"
    "test_a_juju_lxd_container_worker_without_the_gpu_device_is_the_node_given_the_device",
    "driver.aks-engine-addon-off": "doctor.test_aks_engine_addon::"
    "test_aks_engine_agents_with_no_gpu_stack_are_each_the_driver_the_addon_installs",
    "mig.left-on": "doctor.test_doctor_mig_left_on::"
    "test_a_mig_layout_left_after_the_manager_was_switched_off_is_the_mig_link_run_with_all_disabled",
    "node.gpu-lost-at-probe": "doctor.test_doctor_gpu_lost_at_probe::"
    "test_a_gpu_lost_at_probe_on_a_short_node_is_the_node_power_cycled",
    "node.gpu-inforom-corrupted": "doctor.test_doctor_gpu_inforom::"
    "test_a_validation_that_fails_on_a_corrupted_inforom_is_the_gpu_to_replace",
    "workload.driver-capability-missing": "doctor.test_doctor_driver_capability::"
    "test_an_encoder_without_the_video_capability_is_the_toolkit_link_with_the_variable_set",
}
#: ``gpuchain doctor --local`` (the node's own NVML): host work, tested below.
LOCAL = {
    "library": "driver.nvml-missing",
    "not-loaded": "driver.not-loaded",
    "lost": "gpu.lost",
    "other": "driver.nvml-error",
}


def code_ids() -> set[str]:
    """Every finding id written in the doctor's source."""
    ids = {f"{link}.not-ready" for link in NOT_READY_LINKS}
    for path in (ROOT / "src/gpuchain/doctor").rglob("*.py"):
        ids |= set(re.findall(rf'"((?:{PREFIXES})\.[a-z]+(?:-[a-z]+)*)"', path.read_text()))
    return ids


def test_the_ids_are_found_in_the_source() -> None:
    ids = code_ids()
    assert {"stack.missing", "node.pressure", "gpu.lost", "gfd.not-ready", "driver.no-gpus"} <= ids
    assert not any(i.startswith(("nvidia.", "feature.")) for i in ids)


def test_every_id_has_a_tested_fix() -> None:
    in_scenarios = {fid for name in scenario_names() for fid in load_scenario(name).expect}
    for fid, ref in CLUSTER_TESTS.items():
        module, _, test = ref.rpartition("::")
        found = getattr(importlib.import_module(module) if module else test_doctor_fixes, test, None)
        assert callable(found), f"{fid}: no test {ref}"
    covered = in_scenarios | set(CLUSTER_TESTS) | set(LOCAL.values()) | {"driver.no-gpus"}
    missing = sorted(code_ids() - covered)
    assert not missing, f"finding ids with no scenario or fix test: {missing}"
    # Only explanations and consequences go without a fix of their own.
    assert {"device-plugin.mig-resources", "workload.insufficient-gpu"} == test_doctor_fixes.NO_FIX


def test_docs_list_every_id_with_cause_evidence_and_fix() -> None:
    doc = (ROOT / "docs/doctor.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z-]+\.[a-z-]+)`[^\n]*", doc, re.M)}
    missing = sorted(code_ids() - set(rows))
    assert not missing, f"docs/doctor.md has no row for: {missing}"
    for fid, row in rows.items():
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) >= 5 and all(cells[:5]), f"{fid}: row lacks link, cause, evidence or fix: {row}"


@pytest.mark.parametrize(("error", "fid"), sorted(LOCAL.items()))
def test_local_fixes_are_host_work_marked_not_simulated(error: str, fid: str) -> None:
    chain = local_chain(LocalAnswer(node="gpu-1", kernel="6.8.0-40-generic", error=error, message="NVML says so"))
    f = chain.findings[0]
    assert f.id == fid and f.action is not None and f.action.outside_cluster
    assert "host" in f.action.changes[NOT_SIMULATED]
    assert f.action.changes["action"] in f.fix and not f.fix.startswith(("dmesg", "nvidia-smi -q", "kubectl"))


def test_a_node_without_gpus_on_the_bus_is_hardware() -> None:
    chain = local_chain(LocalAnswer(node="gpu-1", kernel="6.8.0-40-generic", driver="570.86.15", cuda="12.8", gpus=()))
    f = chain.findings[0]
    assert f.id == "driver.no-gpus" and f.fix.startswith("# hardware, no command fixes it:")
    assert f.action is not None and f.action.changes[NOT_SIMULATED]
