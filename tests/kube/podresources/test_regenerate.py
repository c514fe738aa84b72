"""The committed stubs are exactly what api.proto compiles to."""

from __future__ import annotations

from pathlib import Path

from exporter.kube.podresources import api_pb2, regenerate


def test_regenerating_gives_byte_identical_stubs(tmp_path: Path) -> None:
    written = regenerate.regenerate(tmp_path)
    assert [path.name for path in written] == list(regenerate.GENERATED)
    for path in written:
        committed = regenerate.PACKAGE_DIR / path.name
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed.name} is out of date: run python -m exporter.kube.podresources.regenerate"
        )


def test_wire_contract_matches_the_kubelet() -> None:
    """Package v1, the three RPCs, and the field numbers a kubelet puts on the wire."""
    file = api_pb2.DESCRIPTOR
    assert file.package == "v1"
    service = file.services_by_name["PodResourcesLister"]
    assert [method.name for method in service.methods] == ["List", "GetAllocatableResources", "Get"]
    numbers = {
        name: {f.name: f.number for f in message.fields}
        for name, message in file.message_types_by_name.items()
    }
    assert numbers["ContainerDevices"] == {"resource_name": 1, "device_ids": 2, "topology": 3}
    assert numbers["NUMANode"] == {"ID": 1}
    assert numbers["DynamicResource"] == {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4}
    assert numbers["ClaimResource"]["share_id"] == 5
    assert numbers["PodResources"] == {"name": 1, "namespace": 2, "containers": 3, "cpu_ids": 4, "memory": 5}
    assert numbers["ContainerResources"] == {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    }
    claim = api_pb2.ClaimResource()
    assert not claim.HasField("share_id")  # proto3 optional keeps presence


def test_tombstoned_field_one_is_reserved() -> None:
    proto = (regenerate.PACKAGE_DIR / "api.proto").read_text()
    message = proto[proto.index("message DynamicResource") :]
    message = message[: message.index("}")]
    assert "reserved 1;" in message and 'reserved "class_name";' in message
