from bench import exposition

OURS = """# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",pci_bus_id="x",device="nvidia0",modelName="H100",Hostname="n"} 40
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",pci_bus_id="y",device="nvidia1",container="c",namespace="ns",pod="p"} 41
# TYPE gpu_pod_exporter_devices gauge
gpu_pod_exporter_devices 2
"""

NVITOP = """# TYPE gpu_temperature_C gauge
gpu_temperature_C{devicename="H100",hostname="h",index="0",uuid="GPU-a"} 40.0
gpu_temperature_C{devicename="H100",hostname="h",index="0",uuid="GPU-a"} 40.0
gpu_temperature_C{devicename="H100",hostname="h",index="3",uuid="GPU-d"} 40.0
"""


def test_size_counts_samples_and_families_not_comments():
    size = exposition.measure(OURS)
    assert size.series == 3
    assert size.families == 2
    assert size.bytes == len(OURS.encode())


def test_gpus_present_counts_distinct_gpus_per_exporter_format():
    assert exposition.gpus_present("ours", OURS) == 2
    assert exposition.gpus_present("nvitop", NVITOP) == 2
    assert exposition.gpus_present("nvitop", OURS) == 0


def test_attributed_series_are_those_with_a_pod_label():
    assert exposition.attributed_series(OURS) == 1
    assert exposition.attributed_series(NVITOP) == 0
