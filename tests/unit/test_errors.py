"""The error registry: stable codes, Fluss's numbers where Fluss has the condition."""

from fluss_spark import errors


def test_codes_match_fluss_numbers():
    expected = {12: "NotLeaderOrFollower", 20: "NonPrimaryKeyTable", 41: "KvSnapshotNotExist",
                66: "ScannerExpired", 67: "UnknownScannerId", 68: "InvalidScanRequest",
                69: "TooManyScanners", 2: "UnsupportedVersion", 7: "TableNotExist"}
    for code, name in expected.items():
        assert errors.error_class(code).__name__ == name


def test_unknown_code_maps_to_unknown_server_error():
    err = errors.from_code(4242, "boom")
    assert isinstance(err, errors.UnknownServerError) and err.message == "boom"


def test_every_error_is_a_fluss_error_with_flags():
    for code, cls in errors.all_codes().items():
        assert issubclass(cls, errors.FlussError) and cls.code == code
        assert isinstance(cls.retriable, bool) and isinstance(cls.refresh_metadata, bool)
    assert errors.NotLeaderOrFollower.retriable and errors.NotLeaderOrFollower.refresh_metadata
