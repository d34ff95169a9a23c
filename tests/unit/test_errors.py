"""The error registry: stable codes, Fluss's numbers where Fluss has the condition."""

import ast
import inspect

import pytest

from fluss_spark import errors


def test_codes_match_fluss_numbers():
    expected = {12: "NotLeaderOrFollower", 20: "NonPrimaryKeyTable", 41: "KvSnapshotNotExist",
                66: "ScannerExpired", 67: "UnknownScannerId", 68: "InvalidScanRequest",
                69: "TooManyScanners", 2: "UnsupportedVersion", 7: "TableNotExist",
                36: "PartitionNotExist", 37: "TableNotPartitioned", 42: "PartitionAlreadyExist",
                43: "InvalidPartitionSpec"}
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


def _api_error_classes_in_source() -> dict[str, int]:
    """Name -> literal ``code`` of every class statement in errors.py deriving from ApiError
    (directly, or through another ApiError class such as NetworkError)."""
    tree = ast.parse(inspect.getsource(errors))
    found = {}
    api_errors = {"ApiError"}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and len(node.bases) == 1 \
                and ast.unparse(node.bases[0]) in api_errors:
            api_errors.add(node.name)
            codes = [stmt.value for stmt in node.body
                     if isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]) == "code"]
            assert len(codes) == 1, f"{node.name} sets code {len(codes)} times"
            found[node.name] = ast.literal_eval(codes[0])
    return found


def test_every_registered_error_is_a_module_level_class_statement_with_a_docstring():
    in_source = _api_error_classes_in_source()
    registered = errors.all_codes()
    assert {cls.__name__: code for code, cls in registered.items()} == in_source
    for cls in registered.values():
        assert getattr(errors, cls.__name__) is cls
        assert cls.__module__ == "fluss_spark.errors" and cls.__qualname__ == cls.__name__
        assert "__doc__" in cls.__dict__ and cls.__doc__ and cls.__doc__.strip()
        for flag in ("code", "retriable", "refresh_metadata"):
            assert flag in cls.__dict__, f"{cls.__name__} does not set {flag} itself"


def test_codes_are_unique_and_a_second_class_for_a_code_is_refused():
    codes = list(_api_error_classes_in_source().values())
    assert len(codes) == len(set(codes)) == len(errors.all_codes())
    before = errors.all_codes()
    with pytest.raises(TypeError, match="registered twice"):
        type("Duplicate", (errors.ApiError,), {"code": errors.TableNotExist.code})
    with pytest.raises(TypeError, match="own wire code"):
        type("NoCode", (errors.ApiError,), {})
    assert errors.all_codes() == before


def test_flags_of_a_few_classes():
    assert (errors.UnknownServerError.code, errors.UnknownServerError.retriable) == (-1, False)
    assert errors.MetadataStoreUnavailable.retriable
    assert not errors.MetadataStoreUnavailable.refresh_metadata
    assert errors.TableNotExist.refresh_metadata and not errors.TableNotExist.retriable
    assert errors.error_class(1007) is errors.AuthorizationFailed
