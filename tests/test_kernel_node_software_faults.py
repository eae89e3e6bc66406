"""Kernel lines that say the node's own software or firmware is unwell, not a part and not the job: RCU's
grace-period thread starved of CPU, an interrupt line the kernel gave up on, and SLUB finding a slab object
overwritten. Each goes to a person about that node; none is the job's exception."""

from triage_support import triage_files as _triage


def test_a_starved_rcu_kthread_goes_to_an_operator_about_that_node(tmp_path):
    d = _triage(tmp_path, {"gpu-n-015/dmesg.log": (
        "[ 2143.009101] rcu: INFO: rcu_sched detected expedited stalls on CPUs/tasks: { 5-... } 23807 jiffies\n"
        "[ 2143.009211] rcu: rcu_sched kthread starved for 23807 jiffies! g7075 f0x0 RCU_GP_WAIT_FQS(3) "
        "->state=0x1 ->cpu=5\n"
        "[ 2143.009215] rcu: \tUnless rcu_sched kthread gets sufficient CPU time, OOM is now expected behavior.\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "node_kernel_stall", "escalate")
    assert d.culprit.nodes == ["gpu-n-015"]


def test_an_interrupt_line_the_kernel_disabled_is_the_nodes_platform(tmp_path):
    d = _triage(tmp_path, {"gpu-n-016/dmesg.log": (
        "[   24.518723] irq 19: nobody cared (try booting with the \"irqpoll\" option)\n"
        "[   24.518790] CPU: 3 PID: 0 Comm: swapper/3 Not tainted 6.8.0-49-generic #49-Ubuntu\n"
        "[   24.519011] handlers:\n"
        "[   24.519055] [<00000000a1b2c3d4>] usb_hcd_irq\n"
        "[   24.519104] Disabling IRQ #19\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "node_irq_disabled", "escalate")


def test_slub_finding_a_corrupted_slab_object_is_the_kernels_memory_not_the_job(tmp_path):
    d = _triage(tmp_path, {"gpu-n-017/dmesg.log": (
        "[ 4410.221903] =============================================================================\n"
        "[ 4410.221907] BUG kmalloc-64 (Tainted: G           O     ): Poison overwritten\n"
        "[ 4410.221909] -----------------------------------------------------------------------------\n"
        "[ 4410.221912] 0xffff8881042c3f40-0xffff8881042c3f47 @offset=8000. First byte 0x0 instead of 0x6b\n"
        "[ 4410.221980] FIX kmalloc-64: Restoring Poison 0xffff8881042c3f40-0xffff8881042c3f47=0x6b\n")})
    assert (d.category.value, d.subtype) == ("infra", "kernel_memory_corruption")
    assert d.subtype != "python_exception"


def test_a_full_neighbour_table_goes_to_an_operator_and_names_no_node(tmp_path):
    # a node talking to hundreds of peers outgrows gc_thresh3; the setting is the images', so no node is drained
    d = _triage(tmp_path, {"gpu-n-118/dmesg.log": (
        "[183221.556102] neighbour: arp_cache: neighbor table overflow!\n"
        "[183221.556342] neighbour: arp_cache: neighbor table overflow!\n"
        "[183226.560017] net_ratelimit: 412 callbacks suppressed\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "node_network_config", "escalate")
    assert d.culprit.nodes == []


def test_a_gpudirect_rdma_module_built_against_another_driver_is_the_nodes_driver_stack(tmp_path):
    # nv_peer_mem, the GPUDirect RDMA module before nvidia_peermem, refusing the installed driver's symbols
    d = _triage(tmp_path, {"gpu-n-033/dmesg.log": (
        "[  366.264584] nv_peer_mem: disagrees about version of symbol nvidia_p2p_get_pages\n"
        "[  366.264587] nv_peer_mem: Unknown symbol nvidia_p2p_get_pages (err -22)\n"
        "[  366.264610] nv_peer_mem: disagrees about version of symbol ib_register_peer_memory_client\n"
        "[  366.264611] nv_peer_mem: Unknown symbol ib_register_peer_memory_client (err -22)\n")})
    assert (d.category.value, d.subtype) == ("infra", "driver_kernel_module_mismatch")
    assert d.rule == "nvidia-driver.gpu-rdma-kernel-module-abi-mismatch"
