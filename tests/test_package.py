from vgpu_scheduler.model import ContainerDevice, MigPlacement


def test_mig_placement_overlap() -> None:
    assert MigPlacement(0, 2).overlaps(MigPlacement(1, 1))
    assert not MigPlacement(0, 2).overlaps(MigPlacement(2, 1))


def test_container_device_defaults() -> None:
    assert ContainerDevice("GPU-0", "NVIDIA", 1000, 30).slots == 0
